//! Sorted listings of large directories, kept between walks.
//!
//! A page of a listing reads the directory that holds the prefix's keys and sorts its entries.
//! With a million keys under one prefix that is a million-entry `getdents` and sort per page,
//! for every page: a walk of the prefix costs the square of its size. Here a directory of at
//! least [`MIN_ENTRIES`] keys is kept sorted once read, and the next page finds its place in it
//! by binary search.
//!
//! A kept listing is used only while the directory's `(dev, inode, mtime, ctime)` is what it
//! was when it was read, checked with one `stat` per use. Every entry created, removed or
//! renamed in a directory sets its mtime and ctime, whoever does it (this process, another one,
//! a person), and the ctime cannot be set back by anyone (`utimes` sets it to now), so a changed
//! directory is read again; a directory removed and made again at the same path has a new ctime
//! even where its inode number is reused. Timestamps are coarse (a clock tick; a second on some
//! filesystems), so a change right after the read could leave them as they were: a listing is
//! therefore only kept when the directory's ctime was at least [`SETTLE`] older than the moment
//! before the read began, and a later change sets a ctime that differs. A directory written all
//! the time is never kept and is read per page, as without this cache.
//!
//! Bounded: at most [`set_budget`] bytes (names, offsets, inode numbers and order) in the process, least
//! recently used dropped first.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use crate::path::{is_key_segment, FOLDER_DIR};

/// Directories with fewer key entries are read per page: their read and sort take well under a
/// millisecond.
pub const MIN_ENTRIES: usize = 1000;

/// How much older than the read a directory's mtime must be for its listing to be kept.
pub const SETTLE: Duration = Duration::from_secs(2);

/// A directory whose size (as `stat` gives it) is below this holds well under [`MIN_ENTRIES`]
/// entries on the filesystems drives use (ext4 and XFS: about 20 bytes an entry of a short name,
/// in 4 KiB blocks; tmpfs: 20 bytes an entry): [`DirCache::listing_if_large`] leaves it to its
/// caller. A hint for speed only: what is kept is decided by the entries read.
const LARGE_DIR_BYTES: u64 = 16 << 10;

/// The default bound of the process's kept listings: a flat prefix of a million keys on each
/// of four drives, or more (a key costs 20 bytes and its name: 40 MB a drive for 20-byte names).
pub const DEFAULT_BUDGET: usize = 256 << 20;

/// An entry of a directory that may hold keys.
pub(super) enum KeyDir {
    /// `.quarry.dir`, where the folder-marker object may be.
    Folder,
    /// A child directory whose name may be a key segment, and its inode number as the
    /// directory listing gives it.
    Key(String, u64),
}

/// The entries of `dir` that may hold keys, in directory order. Keys are directories: files
/// (metadata, parts, temp files), symlinks and names no key can have are left out.
pub(super) fn key_dirs(dir: &Path) -> io::Result<impl Iterator<Item = io::Result<KeyDir>>> {
    Ok(fs::read_dir(dir)?.filter_map(|entry| {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        match entry.file_type() {
            Ok(t) if t.is_dir() => {}
            Ok(_) => return None,
            Err(e) => return Some(Err(e)),
        }
        let name = entry.file_name().into_string().ok()?;
        if name == FOLDER_DIR {
            Some(Ok(KeyDir::Folder))
        } else {
            let ino = entry.ino();
            is_key_segment(&name).then_some(Ok(KeyDir::Key(name, ino)))
        }
    }))
}

/// A directory's entries that matter to a walk, in walk order.
#[derive(Debug)]
pub(super) struct Sorted {
    /// The child directories that may be key segments, concatenated in name order.
    names: String,
    /// `names[offs[i]..offs[i + 1]]` is child `i`.
    offs: Vec<u32>,
    /// Child `i`'s inode number, as the directory listing gave it.
    inos: Vec<u64>,
    /// The directory's device: its children's too, unless one is a mount point.
    pub dev: u64,
    /// The walk order: `idx << 1 | dir`, child `idx` as the object `n` (dir 0) or as the range
    /// of keys below it, `n/` (dir 1), sorted by those strings' bytes.
    order: Vec<u32>,
    /// Whether `.quarry.dir` exists (the folder-marker object may be there).
    pub folder: bool,
}

impl Sorted {
    /// Reads `dir`, which is on device `dev`, and sorts it.
    pub fn read(dir: &Path, dev: u64) -> io::Result<Sorted> {
        let mut children = Vec::new();
        let mut folder = false;
        for entry in key_dirs(dir)? {
            match entry? {
                KeyDir::Folder => folder = true,
                KeyDir::Key(name, ino) => children.push((name, ino)),
            }
        }
        // Children are numbered in name order, close to the walk order: a walk then reads the
        // names one after another in memory, not scattered in the directory's hash order.
        children.sort_unstable();
        let mut names = String::new();
        let mut offs = vec![0u32];
        let inos = children.iter().map(|c| c.1).collect();
        for (name, _) in &children {
            names.push_str(name);
            let end = u32::try_from(names.len()).map_err(|_| {
                io::Error::other(format!("{}: too many entries to list", dir.display()))
            })?;
            offs.push(end);
        }
        drop(children);
        let n = offs.len() - 1;
        let name = |i: usize| &names[offs[i] as usize..offs[i + 1] as usize];
        let mut order: Vec<u32> = (0..2 * n as u32).collect();
        let bytes = |c: u32| {
            name((c >> 1) as usize)
                .as_bytes()
                .iter()
                .copied()
                .chain((c & 1 == 1).then_some(b'/'))
        };
        order.sort_unstable_by(|&a, &b| bytes(a).cmp(bytes(b)));
        Ok(Sorted {
            names,
            offs,
            inos,
            dev,
            order,
            folder,
        })
    }

    /// How many child directories may be keys.
    pub fn children(&self) -> usize {
        self.offs.len() - 1
    }

    /// Child `i`'s name (in name order).
    pub fn name(&self, i: usize) -> &str {
        &self.names[self.offs[i] as usize..self.offs[i + 1] as usize]
    }

    /// Child `i`'s inode number, as the directory listing gave it.
    pub fn ino(&self, i: usize) -> u64 {
        self.inos[i]
    }

    /// How many candidates the walk visits (two per child).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Candidate `i` in walk order: the child's index, its name, and whether it is the range
    /// below the child (`n/`) rather than the object (`n`).
    pub fn get(&self, i: usize) -> (usize, &str, bool) {
        self.candidate(self.order[i])
    }

    /// The first position in walk order where `before` (given as [`Sorted::get`] gives) is
    /// false; `before` must be true, then false, along the walk order.
    pub fn partition_point(&self, mut before: impl FnMut(&str, bool) -> bool) -> usize {
        self.order.partition_point(|&c| {
            let (_, name, dir) = self.candidate(c);
            before(name, dir)
        })
    }

    /// The entries as [`key_dirs`] gives them: the folder marker first, then the children.
    pub fn key_dirs(self: Arc<Self>) -> impl Iterator<Item = io::Result<KeyDir>> {
        let folder = self.folder.then_some(Ok(KeyDir::Folder));
        folder.into_iter().chain(
            (0..self.children())
                .map(move |i| Ok(KeyDir::Key(self.name(i).to_owned(), self.ino(i)))),
        )
    }

    fn candidate(&self, c: u32) -> (usize, &str, bool) {
        let idx = (c >> 1) as usize;
        (idx, self.name(idx), c & 1 == 1)
    }

    fn bytes(&self) -> usize {
        self.names.len() + 4 * (self.offs.len() + self.order.len()) + 8 * self.inos.len()
    }
}

/// What identifies a directory's contents for as long as nothing is created, removed or renamed
/// in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    /// The directory's size: a hint of how many entries it has. Every change to the entries
    /// that changes it changes the times too.
    size: u64,
}

impl Stamp {
    fn of(md: &fs::Metadata) -> Stamp {
        Stamp {
            dev: md.dev(),
            ino: md.ino(),
            mtime: (md.mtime(), md.mtime_nsec()),
            ctime: (md.ctime(), md.ctime_nsec()),
            size: md.size(),
        }
    }

    /// The stamp of a directory as `statx` gives it (asked for at least its inode, times and
    /// size).
    pub(super) fn of_statx(st: &rustix::fs::Statx) -> Stamp {
        Stamp {
            dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            mtime: (st.stx_mtime.tv_sec, i64::from(st.stx_mtime.tv_nsec)),
            ctime: (st.stx_ctime.tv_sec, i64::from(st.stx_ctime.tv_nsec)),
            size: st.stx_size,
        }
    }

    /// The directory's identity while it exists: its device and inode.
    pub(super) fn id(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// Whether the ctime (which every change to the directory sets) is at least [`SETTLE`]
    /// before `before_read`.
    pub(super) fn settled(&self, before_read: SystemTime) -> bool {
        let Ok(now) = before_read.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let Ok(secs) = u64::try_from(self.ctime.0) else {
            return false;
        };
        let ctime = Duration::new(secs, self.ctime.1.clamp(0, 999_999_999) as u32);
        ctime + SETTLE <= now
    }
}

struct Slot {
    stamp: Stamp,
    sorted: Arc<Sorted>,
    used: u64,
    bytes: usize,
}

#[derive(Default)]
struct State {
    slots: HashMap<PathBuf, Slot>,
    bytes: usize,
    tick: u64,
}

impl State {
    /// Drops the least recently used listings until at most `budget` bytes are kept.
    fn trim(&mut self, budget: usize) {
        while self.bytes > budget {
            let Some(lru) = self
                .slots
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(p, _)| p.clone())
            else {
                break;
            };
            if let Some(old) = self.slots.remove(&lru) {
                self.bytes -= old.bytes;
            }
        }
    }
}

/// The process's kept listings.
pub(super) struct DirCache {
    state: Mutex<State>,
    budget: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
}

static CACHE: OnceLock<DirCache> = OnceLock::new();

/// Sets the bound of the process's kept directory listings, in bytes (0 keeps none), dropping
/// the least recently used over it.
pub fn set_budget(bytes: usize) {
    DirCache::global().set_budget(bytes);
}

/// What the process's kept listings did since start, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListCacheFigures {
    /// Pages that found a large directory's listing kept.
    pub hits: u64,
    /// Reads of a large directory (at least [`MIN_ENTRIES`] keys): not kept, or changed since.
    pub misses: u64,
    /// Listings kept now.
    pub listings: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Walks' reads of an object that found its metadata kept.
    pub meta_hits: u64,
    /// Of those, the ones taken without a `statx` of the object's directory: nothing changed
    /// the key through this process since the entry was last checked.
    pub meta_unchecked: u64,
    /// Reads of an object's metadata from its file: not kept, or changed since.
    pub meta_misses: u64,
    /// Objects' metadata kept now.
    pub metas: u64,
    /// Their bytes (an estimate of their heap).
    pub meta_bytes: u64,
}

/// The kept listings' figures.
pub fn figures() -> ListCacheFigures {
    let c = DirCache::global();
    let st = c.state.lock().unwrap_or_else(|e| e.into_inner());
    ListCacheFigures {
        hits: c.hits.load(Ordering::Relaxed),
        misses: c.misses.load(Ordering::Relaxed),
        listings: st.slots.len() as u64,
        bytes: st.bytes as u64,
        ..ListCacheFigures::default()
    }
}

impl DirCache {
    pub fn global() -> &'static DirCache {
        CACHE.get_or_init(|| DirCache::new(DEFAULT_BUDGET))
    }

    fn new(budget: usize) -> DirCache {
        DirCache {
            state: Mutex::new(State::default()),
            budget: AtomicUsize::new(budget),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The sorted listing of `dir`, kept or read now; and whether it was read from disk.
    pub fn listing(&self, dir: &Path) -> io::Result<(Arc<Sorted>, bool)> {
        let before_read = SystemTime::now();
        let stamp = Stamp::of(&fs::metadata(dir)?);
        if let Some(sorted) = self.kept(dir, stamp) {
            return Ok((sorted, false));
        }
        self.read(dir, stamp, stamp.settled(before_read))
            .map(|s| (s, true))
    }

    /// The sorted listing of `dir` when it is kept, or when it can be kept and its size says it
    /// is large (then it is read and sorted now, and kept if it has [`MIN_ENTRIES`]); `None`
    /// otherwise, for a caller that needs only some of the entries to read them as it likes
    /// (sorting a directory that will not be kept costs more than reading it).
    pub fn listing_if_large(&self, dir: &Path) -> io::Result<Option<(Arc<Sorted>, bool)>> {
        let before_read = SystemTime::now();
        let stamp = Stamp::of(&fs::metadata(dir)?);
        if let Some(sorted) = self.kept(dir, stamp) {
            return Ok(Some((sorted, false)));
        }
        if stamp.size < LARGE_DIR_BYTES
            || !stamp.settled(before_read)
            || self.budget.load(Ordering::Relaxed) == 0
        {
            return Ok(None);
        }
        self.read(dir, stamp, true).map(|s| Some((s, true)))
    }

    /// Reads and sorts `dir`, whose stamp before the read is `stamp`; keeps a large listing when
    /// `settled`.
    fn read(&self, dir: &Path, stamp: Stamp, settled: bool) -> io::Result<Arc<Sorted>> {
        let sorted = Arc::new(Sorted::read(dir, stamp.dev)?);
        if sorted.children() >= MIN_ENTRIES {
            self.misses.fetch_add(1, Ordering::Relaxed);
            if settled {
                self.keep(dir, stamp, sorted.clone());
            }
        }
        Ok(sorted)
    }

    fn set_budget(&self, bytes: usize) {
        self.budget.store(bytes, Ordering::Relaxed);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.trim(bytes);
    }

    fn kept(&self, dir: &Path, stamp: Stamp) -> Option<Arc<Sorted>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.tick += 1;
        let tick = st.tick;
        let slot = st.slots.get_mut(dir)?;
        if slot.stamp != stamp {
            return None; // replaced at the next read
        }
        slot.used = tick;
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(slot.sorted.clone())
    }

    fn keep(&self, dir: &Path, stamp: Stamp, sorted: Arc<Sorted>) {
        let budget = self.budget.load(Ordering::Relaxed);
        let bytes = sorted.bytes() + dir.as_os_str().len();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = st.slots.remove(dir) {
            st.bytes -= old.bytes;
        }
        if bytes > budget {
            return;
        }
        st.trim(budget - bytes);
        st.tick += 1;
        let used = st.tick;
        st.bytes += bytes;
        st.slots.insert(
            dir.to_path_buf(),
            Slot {
                stamp,
                sorted,
                used,
                bytes,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> tempfile::TempDir {
        if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        }
    }

    /// A directory of `n` child directories named `p0000…`, plus a file and the folder marker.
    fn filled(root: &Path, p: &str, n: usize) -> PathBuf {
        let dir = root.join(p);
        fs::create_dir(&dir).unwrap();
        for i in 0..n {
            fs::create_dir(dir.join(format!("{p}{i:04}"))).unwrap();
        }
        fs::write(dir.join("quarry.meta"), b"x").unwrap();
        fs::create_dir(dir.join(FOLDER_DIR)).unwrap();
        dir
    }

    #[test]
    fn a_listing_is_in_walk_order_with_the_folder_marker_apart() {
        let t = tmp();
        let dir = t.path().join("d");
        fs::create_dir(&dir).unwrap();
        for n in ["a-c", "a", "b", "a.b", "a0"] {
            fs::create_dir(dir.join(n)).unwrap();
        }
        fs::create_dir(dir.join(FOLDER_DIR)).unwrap();
        fs::write(dir.join("f"), b"").unwrap();
        let s = Sorted::read(&dir, 0).unwrap();
        assert!(s.folder);
        assert_eq!(s.children(), 5);
        let order: Vec<String> = (0..s.len())
            .map(|i| {
                let (_, n, d) = s.get(i);
                format!("{n}{}", if d { "/" } else { "" })
            })
            .collect();
        // '-' < '.' < '/' < '0': an object sorts apart from the keys below it.
        assert_eq!(
            order,
            ["a", "a-c", "a-c/", "a.b", "a.b/", "a/", "a0", "a0/", "b", "b/"]
        );
    }

    #[test]
    fn only_large_settled_directories_are_kept_and_a_change_is_seen() {
        let t = tmp();
        let c = DirCache::new(DEFAULT_BUDGET);
        let small = filled(t.path(), "s", 10);
        let large = filled(t.path(), "l", MIN_ENTRIES);
        // Just written: read every time.
        assert!(c.listing(&large).unwrap().1);
        assert!(c.listing(&large).unwrap().1);
        std::thread::sleep(SETTLE + Duration::from_millis(100));
        assert!(c.listing(&small).unwrap().1);
        assert!(
            c.listing(&small).unwrap().1,
            "small directories are not kept"
        );
        assert!(c.listing(&large).unwrap().1);
        let (kept, read) = c.listing(&large).unwrap();
        assert!(!read, "settled and unchanged: kept");
        assert_eq!(kept.children(), MIN_ENTRIES);
        assert_eq!(c.hits.load(Ordering::Relaxed), 1);

        // A key created, then one removed, by anyone: read again at once.
        fs::create_dir(large.join("new")).unwrap();
        let (s, read) = c.listing(&large).unwrap();
        assert!(read);
        assert_eq!(s.children(), MIN_ENTRIES + 1);
        fs::remove_dir(large.join("l0000")).unwrap();
        let (s, read) = c.listing(&large).unwrap();
        assert!(read);
        assert_eq!(s.children(), MIN_ENTRIES);

        // Removed and made again at the same path: a new directory, read.
        std::thread::sleep(SETTLE + Duration::from_millis(100));
        assert!(c.listing(&large).unwrap().1);
        assert!(!c.listing(&large).unwrap().1);
        fs::remove_dir_all(&large).unwrap();
        let again = filled(t.path(), "l", MIN_ENTRIES + 5);
        let (s, read) = c.listing(&again).unwrap();
        assert!(read);
        assert_eq!(s.children(), MIN_ENTRIES + 5);
        fs::remove_dir_all(&again).unwrap();
        assert!(c.listing(&again).is_err());
    }

    #[test]
    fn a_probe_reads_only_what_it_can_keep() {
        let t = tmp();
        let c = DirCache::new(DEFAULT_BUDGET);
        let small = filled(t.path(), "s", 10);
        let large = filled(t.path(), "l", MIN_ENTRIES);
        assert!(c.listing_if_large(&large).unwrap().is_none(), "not settled");
        std::thread::sleep(SETTLE + Duration::from_millis(100));
        assert!(c.listing_if_large(&small).unwrap().is_none());
        let (s, read) = c.listing_if_large(&large).unwrap().unwrap();
        assert!(read);
        assert_eq!(s.children(), MIN_ENTRIES);
        assert!(!c.listing_if_large(&large).unwrap().unwrap().1, "kept");
        c.set_budget(0);
        assert!(
            c.listing_if_large(&large).unwrap().is_none(),
            "nothing can be kept"
        );
        assert!(c.listing_if_large(&t.path().join("gone")).is_err());
    }

    #[test]
    fn the_budget_drops_the_least_recently_used() {
        let t = tmp();
        let dirs: Vec<PathBuf> = ["a", "b", "c"]
            .iter()
            .map(|p| filled(t.path(), p, MIN_ENTRIES))
            .collect();
        let one = Sorted::read(&dirs[0], 0).unwrap().bytes() + dirs[0].as_os_str().len();
        let c = DirCache::new(2 * one + one / 2);
        std::thread::sleep(SETTLE + Duration::from_millis(100));
        let kept = |d: &Path| !c.listing(d).unwrap().1;
        assert!(!kept(&dirs[0]) && !kept(&dirs[1]));
        assert!(kept(&dirs[0]), "a used last: b is the least recently used");
        assert!(!kept(&dirs[2]), "c read, b dropped for it");
        assert!(kept(&dirs[0]) && kept(&dirs[2]));
        assert!(!kept(&dirs[1]));
        let st = c.state.lock().unwrap();
        assert_eq!(st.slots.len(), 2);
        assert!(st.bytes <= 2 * one + one / 2);
        drop(st);

        // A budget of 0 drops what is kept and keeps nothing.
        c.set_budget(0);
        assert_eq!(c.state.lock().unwrap().bytes, 0);
        assert!(!kept(&dirs[2]) && !kept(&dirs[2]));
    }
}
