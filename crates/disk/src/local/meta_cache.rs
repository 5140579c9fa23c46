//! Object metadata read by listings, kept between walks.
//!
//! A page of a listing reads every key's metadata on every drive: an `openat`, a `read` and a
//! `close` per key and drive, beside the `statx` of the key's directory the walk makes anyway
//! (its link count says whether keys lie below it). With the kernel's caches warm, those calls
//! were most of a page's time. Here the metadata a walk read is kept with the [`Stamp`] of the
//! object's directory (device, inode, mtime, ctime, size, as for kept directory listings), and a
//! later walk that finds the directory with the same stamp takes it instead of reading the file.
//!
//! Why an unchanged stamp means unchanged metadata: `quarry.meta` is only ever replaced whole,
//! written to a temporary file in the object's directory and renamed over the old one, or
//! removed. Each of those creates, renames or removes an entry of the directory, which sets its
//! mtime and ctime, whoever does it; the ctime cannot be set back (`utimes` sets it to now), and
//! a directory removed and made again has a new ctime even where its inode number is reused.
//! Timestamps are coarse (a clock tick), so a change right after the read could leave them as
//! they were: metadata is only kept when the directory's ctime is at least [`SETTLE`] older than
//! the moment before the stat, and a later change then sets a ctime that differs. An object
//! written in the last two seconds is read every time.
//!
//! Without even the `statx`: once an entry was checked against its directory's stamp, a walk
//! takes it as it is while the drive made no change to that key since (see [`Epochs`]).
//!
//! Bounded: at most the budget's bytes (an estimate of what each kept metadata holds), in
//! [`SHARDS`] shards. A full shard drops the entries no walk used for [`IDLE`] (at most once
//! per half of it) and otherwise keeps nothing new. A walk over more keys than fit, repeated,
//! keeps finding the part that was kept, where least-recently-used order would push out every
//! entry before its next use; entries of objects deleted since, never used again, go within a
//! minute of the shard filling.
//!
//! [`SETTLE`]: super::dir_cache::SETTLE

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};
use std::mem::size_of;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::dir_cache::{ListCacheFigures, Stamp, DEFAULT_BUDGET};
use crate::meta::{ObjectMeta, PartInfo};

/// Change epochs of a drive's keys: slots of a counter, each shared by the keys whose
/// [`key_hash`] falls in it. Every change the drive makes to a key's directory (its metadata,
/// its data dirs, a key made or removed below it) bumps the slot of that key and of each of its
/// prefixes, after the change and before the call returns ([`Changing`]). A kept entry checked
/// against its directory's stamp notes its key's epoch read before that check; while the epoch
/// is the same, nothing this process did changed the directory since, and a walk takes the entry
/// without a `statx` ([`MetaCache::unchanged`]).
///
/// One process serves a drive (the orphan sweep relies on it too), and the drives of a process
/// opened on the same root share one `Epochs`. What anything else changes in an object's
/// directory (a person removing a `quarry.meta` by hand) is seen at the next change of that key
/// through this process, or once the entry is dropped; keys created or removed are seen at once
/// whoever makes them, through their parent directory's stamp. Removals this process makes
/// without a bump (retired data dirs, the orphan sweep) only lower a directory's link count,
/// which makes a walk read a directory it could have skipped, never skip one.
pub(crate) struct Epochs {
    slots: Box<[AtomicU64]>,
}

/// Slots of a drive's epochs (32 KiB).
const EPOCH_SLOTS: usize = 4096;

/// Where the next drive's epochs start: each starts past every value another could reach, so an
/// entry checked under one never matches another's.
static NEXT_EPOCHS: AtomicU64 = AtomicU64::new(0);

/// The epochs of the drives open now, by root.
static OPEN_EPOCHS: Mutex<Option<HashMap<PathBuf, Weak<Epochs>>>> = Mutex::new(None);

impl std::fmt::Debug for Epochs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epochs").finish_non_exhaustive()
    }
}

impl Epochs {
    /// The epochs of the drive at `root`: those of a drive open on it already, else new ones.
    pub fn of_drive(root: &Path) -> Arc<Epochs> {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        let mut open = OPEN_EPOCHS.lock().unwrap_or_else(|e| e.into_inner());
        let open = open.get_or_insert_with(HashMap::new);
        if let Some(e) = open.get(&root).and_then(Weak::upgrade) {
            return e;
        }
        open.retain(|_, e| e.strong_count() > 0);
        let e = Arc::new(Epochs::new());
        open.insert(root, Arc::downgrade(&e));
        e
    }

    fn new() -> Epochs {
        let start = NEXT_EPOCHS.fetch_add(1 << 40, Ordering::Relaxed);
        Epochs {
            slots: (0..EPOCH_SLOTS).map(|_| AtomicU64::new(start)).collect(),
        }
    }

    fn slot(&self, key: u64) -> &AtomicU64 {
        &self.slots[epoch_slot_index(key)]
    }

    /// The change epoch of the key whose hash is `key`.
    pub fn epoch(&self, key: u64) -> u64 {
        self.slot(key).load(Ordering::SeqCst)
    }

    /// Notes a change to the directory of `key` of `bucket` and to those of its prefixes (made
    /// or pruned with it, their link counts changed).
    pub fn changed(&self, bucket: &str, key: &str) {
        for (i, _) in key.match_indices('/').filter(|(i, _)| *i > 0) {
            self.slot(key_hash(bucket, &key[..i]))
                .fetch_add(1, Ordering::SeqCst);
        }
        self.slot(key_hash(bucket, key))
            .fetch_add(1, Ordering::SeqCst);
    }

    /// A guard that notes a change to `key` of `bucket` when dropped ([`Changing`]).
    pub fn changing<'a>(&'a self, bucket: &'a str, key: &'a str) -> Changing<'a> {
        Changing {
            epochs: self,
            bucket,
            key,
        }
    }

    /// Notes a change to every key (a bucket removed).
    pub fn changed_all(&self) {
        for e in self.slots.iter() {
            e.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The slot of a key's epoch, by its [`key_hash`].
pub(super) fn epoch_slot_index(key: u64) -> usize {
    (key % EPOCH_SLOTS as u64) as usize
}

/// What a kept entry notes of the key it was checked as (its [`key_hash`]) and the key's epoch
/// then: a single word, which differs from the note of another key or epoch but by a chance of
/// one in 2^64.
fn tag(key: u64, epoch: u64) -> u64 {
    key ^ epoch
}

/// The hash of key `key` of bucket `bucket` that kept entries and epochs know it by.
pub(super) fn key_hash(bucket: &str, key: &str) -> u64 {
    let mut h = DefaultHasher::new();
    bucket.hash(&mut h);
    key.hash(&mut h);
    h.finish()
}

/// Calls [`Epochs::changed`] when dropped: held by each call that changes a key's directory,
/// so that every way out of it (errors included, after a part of the change was made) bumps.
pub(super) struct Changing<'a> {
    epochs: &'a Epochs,
    bucket: &'a str,
    key: &'a str,
}

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.epochs.changed(self.bucket, self.key);
    }
}

/// Shards of the cache, each under its own lock: the walks of a set's drives run at once.
const SHARDS: usize = 16;

/// Entries unused this long are dropped when their shard is full; until then a full shard keeps
/// what it has and keeps nothing new.
const IDLE: Duration = Duration::from_secs(60);

/// Metadata estimated larger than this (an object of thousands of parts) is read every time.
const MAX_ENTRY_BYTES: usize = 64 << 10;

struct Kept {
    stamp: Stamp,
    /// The directory's link count with that stamp.
    nlink: u32,
    /// The [`tag`] of the key it was last checked as and that key's epoch (see [`Epochs`])
    /// read before the check.
    tag: u64,
    /// `None`: the directory holds no object (only keys below it).
    meta: Option<Arc<ObjectMeta>>,
    /// At most [`MAX_ENTRY_BYTES`].
    bytes: u32,
    /// The [`MetaCache::tick`] of its last use.
    used: u64,
}

/// Hashes a directory's `(device, inode)` to its inode number in the low bits, where the table
/// finds its slot, and a mix of both in the top bits, which it compares first. Keys written one
/// after another have inode numbers one after another, and a walk visits them so: their slots
/// are then neighbours in memory, and a page's lookups do not each miss the CPU's caches (a
/// scattered table cost a sixth of a warm page).
#[derive(Default)]
struct InoHasher {
    dev: u64,
    ino: u64,
}

impl Hasher for InoHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.dev = self.ino;
        self.ino = x;
    }

    fn finish(&self) -> u64 {
        let mix = (self.ino ^ self.dev.rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (self.ino & ((1 << 57) - 1)) | (mix & (0x7f << 57))
    }
}

#[derive(Default)]
struct Shard {
    entries: HashMap<(u64, u64), Kept, BuildHasherDefault<InoHasher>>,
    bytes: usize,
    /// The tick of the last sweep of idle entries.
    swept: u64,
}

impl Shard {
    fn remove(&mut self, id: &(u64, u64)) -> Option<Kept> {
        let k = self.entries.remove(id)?;
        self.bytes -= k.bytes as usize;
        Some(k)
    }

    /// Keeps `k` if there is room, after dropping the idle entries if there is none and they
    /// were not dropped this tick.
    fn insert(&mut self, k: Kept, budget: usize) {
        let id = k.stamp.id();
        self.remove(&id);
        let bytes = k.bytes as usize;
        if self.bytes + bytes > budget && self.swept < k.used {
            self.swept = k.used;
            self.drop_unused_before(k.used.saturating_sub(1));
        }
        if self.bytes + bytes <= budget {
            self.bytes += bytes;
            self.entries.insert(id, k);
        }
    }

    /// Drops the entries last used before tick `t`.
    fn drop_unused_before(&mut self, t: u64) {
        let mut freed = 0;
        self.entries.retain(|_, k| {
            let keep = k.used >= t;
            if !keep {
                freed += k.bytes as usize;
            }
            keep
        });
        self.bytes -= freed;
    }

    /// Drops entries until at most `target` bytes are kept, the least recently used first.
    fn shrink(&mut self, target: usize) {
        let mut ticks: Vec<u64> = self.entries.values().map(|k| k.used).collect();
        ticks.sort_unstable();
        ticks.dedup();
        for t in ticks {
            if self.bytes <= target {
                break;
            }
            self.drop_unused_before(t + 1);
        }
    }
}

/// The process's kept metadata.
pub(super) struct MetaCache {
    shards: Vec<Mutex<Shard>>,
    /// When the ticks began; a tick is half the idle time.
    start: Instant,
    idle: Duration,
    /// Bytes for all shards together.
    budget: AtomicUsize,
    hits: AtomicU64,
    /// Hits taken without a `statx` ([`MetaCache::unchanged`]).
    unchecked: AtomicU64,
    misses: AtomicU64,
}

static CACHE: OnceLock<MetaCache> = OnceLock::new();

impl MetaCache {
    pub fn global() -> &'static MetaCache {
        CACHE.get_or_init(|| MetaCache::new(DEFAULT_BUDGET))
    }

    fn new(budget: usize) -> MetaCache {
        MetaCache::with_idle(budget, IDLE)
    }

    fn with_idle(budget: usize, idle: Duration) -> MetaCache {
        MetaCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            start: Instant::now(),
            idle,
            budget: AtomicUsize::new(budget),
            hits: AtomicU64::new(0),
            unchecked: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The shard of a directory: runs of 64 inode numbers share one, so that neighbours stay
    /// neighbours (see [`InoHasher`]), and the runs are spread over the shards by a hash
    /// (filesystems hand out inode numbers unevenly).
    fn shard(&self, id: (u64, u64)) -> MutexGuard<'_, Shard> {
        let h = ((id.1 >> 6) ^ id.0.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let i = (h >> 60) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Time in halves of the idle time since the cache began, from 1.
    fn tick(&self) -> u64 {
        let half = (self.idle / 2).as_nanos().max(1);
        (self.start.elapsed().as_nanos() / half) as u64 + 1
    }

    fn shard_budget(&self) -> usize {
        self.budget.load(Ordering::Relaxed) / SHARDS
    }

    /// What is kept for the directory `(dev, ino)` of key `key` (its [`key_hash`]), with its
    /// link count, if its drive (whose epochs are `epochs`) made no change to that key since
    /// the entry was last checked against its directory's stamp: then it is what the directory
    /// holds, without a `statx` to say so.
    pub fn unchanged(
        &self,
        id: (u64, u64),
        key: u64,
        epochs: &Epochs,
    ) -> Option<(Option<Arc<ObjectMeta>>, u32)> {
        let mut shard = self.shard(id);
        let found = match shard.entries.get_mut(&id) {
            Some(k) if k.tag == tag(key, epochs.epoch(key)) => {
                k.used = self.tick();
                Some((k.meta.clone(), k.nlink))
            }
            _ => None,
        };
        drop(shard);
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            self.unchecked.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// What is kept for the object directory whose stamp is now `stamp`, if it was read with
    /// that stamp: `Some(None)` when it held no object. A found entry is noted as checked now,
    /// as key `key` at `epoch` (read before the stamp), with link count `nlink`.
    pub fn kept(
        &self,
        stamp: &Stamp,
        nlink: u32,
        key: u64,
        epoch: u64,
    ) -> Option<Option<Arc<ObjectMeta>>> {
        let id = stamp.id();
        let mut shard = self.shard(id);
        let found = match shard.entries.get_mut(&id) {
            Some(k) if k.stamp == *stamp => {
                k.used = self.tick();
                (k.nlink, k.tag) = (nlink, tag(key, epoch));
                Some(k.meta.clone())
            }
            Some(_) => {
                shard.remove(&id); // changed since: read again, and kept again if settled
                None
            }
            None => None,
        };
        drop(shard);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps what was read from the object directory of key `key` (its [`key_hash`]) whose
    /// stamp and link count before the read were `stamp` and `nlink`, with the key's `epoch`
    /// read before the stamp. The caller keeps only what it read after the directory had
    /// settled.
    pub fn keep(
        &self,
        stamp: Stamp,
        nlink: u32,
        key: u64,
        epoch: u64,
        meta: Option<&Arc<ObjectMeta>>,
    ) {
        let bytes = estimate(meta.map(|m| &**m));
        let budget = self.shard_budget();
        if bytes > MAX_ENTRY_BYTES || bytes > budget {
            return;
        }
        let k = Kept {
            stamp,
            nlink,
            tag: tag(key, epoch),
            meta: meta.cloned(),
            bytes: bytes as u32, // at most MAX_ENTRY_BYTES
            used: self.tick(),
        };
        self.shard(stamp.id()).insert(k, budget);
    }

    fn set_budget(&self, bytes: usize) {
        self.budget.store(bytes, Ordering::Relaxed);
        for s in &self.shards {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            s.shrink(bytes / SHARDS);
        }
    }

    /// Entries and their bytes kept now.
    fn held(&self) -> (u64, u64) {
        self.shards.iter().fold((0, 0), |(n, b), s| {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            (n + s.entries.len() as u64, b + s.bytes as u64)
        })
    }
}

/// What a kept entry holds, in bytes: its slot in the table (twice over: a table grows by
/// doubling), and the metadata with its strings, maps and parts, each allocation with the
/// allocator's 16 bytes of overhead. Checked against the process's resident size: 120,000 listing
/// views of a plain object (30,000 keys on 4 drives, kept listings of their directory included)
/// took 770 B each, where this said 652 (freed pieces of the whole metadata the views were cut
/// from stay resident; the entry has grown by 8 bytes since, this by 16); the whole metadata
/// took 2.8 KB where it said 2.6.
fn estimate(meta: Option<&ObjectMeta>) -> usize {
    const ALLOC: usize = 16;
    const SLOT: usize = 2 * (size_of::<Kept>() + size_of::<(u64, u64)>() + 8);
    // A B-tree node holds up to 11 entries and is allocated whole.
    const MAP_NODE: usize = 8 + 4 + 11 * 2 * size_of::<String>() + ALLOC;
    let Some(m) = meta else {
        return SLOT;
    };
    let string = |s: &str| if s.is_empty() { 0 } else { s.len() + ALLOC };
    let map = |m: &BTreeMap<String, String>| {
        m.len().div_ceil(11) * MAP_NODE
            + m.iter().map(|(k, v)| string(k) + string(v)).sum::<usize>()
    };
    SLOT + size_of::<ObjectMeta>()
        + 16
        + ALLOC
        + string(&m.etag)
        + map(&m.headers)
        + map(&m.user_meta)
        + map(&m.checksums)
        + string(&m.erasure.codec)
        + string(&m.erasure.bitrot)
        + m.erasure.distribution.len()
        + ALLOC
        + m.parts.len() * size_of::<PartInfo>()
        + ALLOC
        + m.parts.iter().map(|p| string(&p.etag)).sum::<usize>()
}

/// Sets the bound of the process's kept metadata, in bytes (0 keeps none).
pub fn set_budget(bytes: usize) {
    MetaCache::global().set_budget(bytes);
}

/// Fills in the kept metadata's figures: uses and reads since start, entries and bytes now.
pub fn add_figures(f: &mut ListCacheFigures) {
    let c = MetaCache::global();
    (f.metas, f.meta_bytes) = c.held();
    f.meta_hits = c.hits.load(Ordering::Relaxed);
    f.meta_unchecked = c.unchecked.load(Ordering::Relaxed);
    f.meta_misses = c.misses.load(Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    use rustix::fs::{AtFlags, StatxFlags, CWD};

    fn stamp(p: &Path) -> Stamp {
        let st =
            rustix::fs::statx(CWD, p, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::BASIC_STATS).unwrap();
        Stamp::of_statx(&st)
    }

    use super::super::walk::tests::meta;

    /// What a walk keeps of an object as an SDK writes it (a content type, a checksum, one
    /// part) is its listing view, a third of the whole or less.
    #[test]
    fn a_listing_view_costs_a_third_of_the_whole() {
        let mut m = meta(&"e".repeat(32));
        m.headers
            .insert("content-type".into(), "application/octet-stream".into());
        m.checksums
            .insert("crc64nvme".into(), "AAAAAAAAAAA=".into());
        m.parts.push(PartInfo {
            number: 1,
            size: 1,
            etag: "e".repeat(32),
        });
        m.inline = None;
        let (whole, view) = (estimate(Some(&m)), estimate(Some(&m.listing_view())));
        assert!(3 * view <= whole, "view {view} B, whole {whole} B");
    }

    /// Drives opened on one root share their epochs, so a change through either is seen by a
    /// walk of the other; epochs made anew never start where others have been.
    #[test]
    fn drives_on_one_root_share_their_epochs() {
        let t = tempfile::tempdir().unwrap();
        let a = Epochs::of_drive(t.path());
        let b = Epochs::of_drive(&t.path().join("."));
        assert!(Arc::ptr_eq(&a, &b));
        let (k, below) = (key_hash("b", "k"), key_hash("b", "k/x"));
        let (e, e_below) = (a.epoch(k), a.epoch(below));
        b.changed("b", "k/x");
        assert_ne!(
            a.epoch(k),
            e,
            "a prefix's directory changes with the key below it"
        );
        assert_ne!(a.epoch(below), e_below);
        let e = a.epoch(k);
        a.changed_all();
        assert_ne!(b.epoch(k), e);

        let u = tempfile::tempdir().unwrap();
        let other = Epochs::of_drive(u.path());
        assert!(!Arc::ptr_eq(&a, &other));
        let last = a.epoch(k);
        drop((a, b));
        let again = Epochs::of_drive(t.path());
        assert!(
            again.epoch(k) > last,
            "reopened: new epochs, past the old ones"
        );
        assert_ne!(other.epoch(k), again.epoch(k));
    }

    #[test]
    fn kept_only_while_the_directory_is_unchanged() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("k");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("quarry.meta"), b"1").unwrap();
        let c = MetaCache::new(DEFAULT_BUDGET);
        let s = stamp(&dir);
        assert!(c.kept(&s, 2, 0, 0).is_none());
        c.keep(s, 2, 0, 0, Some(&Arc::new(meta("one"))));
        assert_eq!(c.kept(&s, 2, 0, 0).unwrap().unwrap().etag, "one");

        // Replaced the way a drive replaces it: a temporary file renamed over it.
        std::thread::sleep(Duration::from_millis(20));
        fs::write(dir.join("tmp"), b"2").unwrap();
        fs::rename(dir.join("tmp"), dir.join("quarry.meta")).unwrap();
        let s2 = stamp(&dir);
        assert_ne!(s, s2);
        assert!(
            c.kept(&s2, 2, 0, 0).is_none(),
            "a replaced metadata is read again"
        );
        c.keep(s2, 2, 0, 0, None);
        assert_eq!(c.kept(&s2, 2, 0, 0), Some(None), "no object is kept too");

        // Removed and made again: another directory.
        fs::remove_dir_all(&dir).unwrap();
        fs::create_dir(&dir).unwrap();
        assert!(c.kept(&stamp(&dir), 2, 0, 0).is_none());
        assert_eq!(c.hits.load(Ordering::Relaxed), 2);
        assert_eq!(c.misses.load(Ordering::Relaxed), 3);
        let settled = stamp(&dir).settled(SystemTime::now());
        assert!(
            !settled,
            "just made: not settled, the walk does not keep it"
        );
    }

    #[test]
    fn the_budget_bounds_what_is_kept() {
        let one = estimate(Some(&Arc::new(meta("e"))));
        let budget = SHARDS * 10 * one; // about 10 entries a shard
        let c = MetaCache::with_idle(budget, Duration::from_secs(2));
        let t = tempfile::tempdir().unwrap();
        let dirs = |p: &str, n: usize| -> Vec<Stamp> {
            (0..n)
                .map(|i| {
                    let d = t.path().join(format!("{p}{i}"));
                    fs::create_dir(&d).unwrap();
                    stamp(&d)
                })
                .collect()
        };
        let stamps = dirs("k", 2000);
        // A walk over more keys than fit, repeated: what the first kept, the next ones find.
        let walk = || {
            stamps
                .iter()
                .filter(|s| {
                    let hit = c.kept(s, 2, 0, 0).is_some();
                    if !hit {
                        c.keep(**s, 2, 0, 0, Some(&Arc::new(meta("e"))));
                    }
                    hit
                })
                .count()
        };
        assert_eq!(walk(), 0);
        let (n, bytes) = c.held();
        assert!(bytes <= budget as u64, "{bytes}");
        assert!(n >= (SHARDS * 10 / 2) as u64, "{n}");
        assert_eq!(walk() as u64, n, "the part kept is found again");
        assert_eq!(walk() as u64, n);

        // Unused for the idle time: dropped to make room.
        std::thread::sleep(Duration::from_millis(2200));
        let new = dirs("n", 2000);
        for s in &new {
            c.keep(*s, 2, 0, 0, Some(&Arc::new(meta("e"))));
        }
        let kept_new = new.iter().filter(|s| c.kept(s, 2, 0, 0).is_some()).count();
        assert!(kept_new as u64 >= n / 2, "{kept_new} of {n}");
        assert!(c.held().1 <= budget as u64);

        // A smaller budget drops the least recently used first; 0 keeps nothing.
        c.set_budget(budget / 2);
        assert!(c.held().1 <= (budget / 2) as u64);
        c.set_budget(0);
        assert_eq!(c.held(), (0, 0));
        c.keep(new[0], 2, 0, 0, Some(&Arc::new(meta("e"))));
        assert!(
            c.kept(&new[0], 2, 0, 0).is_none(),
            "a budget of 0 keeps nothing"
        );
    }
}
