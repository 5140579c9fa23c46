//! Data dirs of replaced and deleted versions, kept at their paths while reads may still use them.
//!
//! GETs take no lock. A GET resolves a version from the metadata, then reads its shards block by
//! block, each by path. An overwrite or a delete that committed meanwhile removed the version's
//! data dir at once: the GET's next block failed, and a body that had begun broke off.
//!
//! Such a data dir is now retired instead: it stays where it is, and goes once no shard read has
//! used it for the grace period (a reaper task per drive). A GET that resolved the version before
//! the change reads it to the end, as on S3, unless its client stalls between two blocks for
//! longer than the grace.
//! - Nothing new reaches a retired data dir: no metadata names it, so a GET, a listing or a heal
//!   that starts after the change does not find it. A listing ignores a directory with no
//!   `quarry.meta` in or below it, which is what a deleted key's directory is meanwhile.
//! - Space is bounded: a drive keeps retired data only while it stays under a sixteenth of the
//!   space free on the drive (looked at on each retirement); beyond that the least recently read
//!   go at once.
//! - The orphan sweep leaves a retired data dir alone. A restart forgets them; the sweep then
//!   removes them as the orphans they are.
//! - With a grace of zero a data dir is removed at once.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::debug;
use uuid::Uuid;

use super::{prune_empty_dirs, remove_dir_all_logged};

/// The default grace: how long a retired data dir stays after its last read.
pub const DEFAULT_RETIRED_GRACE: Duration = Duration::from_secs(30);

/// Retired data is kept under `available / BUDGET_DIVISOR` of its drive.
const BUDGET_DIVISOR: u64 = 16;

/// The reaper never wakes more often than this.
const MIN_TICK: Duration = Duration::from_millis(200);

/// What the retired data of this process's drives is and did, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetiredFigures {
    /// Data dirs kept now.
    pub kept: u64,
    /// Their bytes (an estimate: object size over data shards).
    pub bytes: u64,
    /// Data dirs retired since start (kept for the grace, not removed at once).
    pub retired: u64,
    /// Data dirs removed before their grace because the budget was full.
    pub over_budget: u64,
}

static KEPT: AtomicU64 = AtomicU64::new(0);
static KEPT_BYTES: AtomicU64 = AtomicU64::new(0);
static RETIRED: AtomicU64 = AtomicU64::new(0);
static OVER_BUDGET: AtomicU64 = AtomicU64::new(0);

/// The retired data of every drive of this process.
pub fn figures() -> RetiredFigures {
    RetiredFigures {
        kept: KEPT.load(Ordering::Relaxed),
        bytes: KEPT_BYTES.load(Ordering::Relaxed),
        retired: RETIRED.load(Ordering::Relaxed),
        over_budget: OVER_BUDGET.load(Ordering::Relaxed),
    }
}

/// The retired data dirs of one drive.
#[derive(Debug)]
pub(super) struct Retired {
    grace: Duration,
    state: Mutex<State>,
    /// How many are kept: while it is 0 a shard read looks at nothing more.
    count: AtomicUsize,
}

#[derive(Debug, Default)]
struct State {
    dirs: HashMap<Uuid, Kept>,
    /// `(last_read, id)` of every kept one: the least recently read first.
    order: BTreeSet<(Instant, Uuid)>,
    bytes: u64,
}

#[derive(Debug)]
struct Kept {
    bucket_dir: PathBuf,
    obj_dir: PathBuf,
    bytes: u64,
    last_read: Instant,
}

/// A data dir to remove now: its object directory's bucket, the object directory, its id.
type Doomed = (PathBuf, PathBuf, Uuid);

impl Retired {
    pub(super) fn new(grace: Duration) -> Retired {
        Retired {
            grace,
            state: Mutex::new(State::default()),
            count: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent at every await-free step; a panic elsewhere does not
        // poison what it holds.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Retires the data dir `id` of `obj_dir` (in `bucket_dir`), about `bytes` on this drive,
    /// or removes it at once when the grace is zero or it does not fit the budget. Blocking.
    /// The caller prunes `obj_dir` if it may be empty now.
    pub(super) fn retire(&self, bucket_dir: &Path, obj_dir: &Path, id: Uuid, bytes: u64) {
        let budget = (!self.grace.is_zero())
            .then(|| rustix::fs::statvfs(obj_dir).ok())
            .flatten()
            .map_or(0, |st| {
                st.f_bavail.saturating_mul(st.f_frsize) / BUDGET_DIVISOR
            });
        if self.grace.is_zero() || bytes > budget {
            if !self.grace.is_zero() {
                OVER_BUDGET.fetch_add(1, Ordering::Relaxed);
            }
            remove_dir_all_logged(&obj_dir.join(id.to_string()));
            return;
        }
        RETIRED.fetch_add(1, Ordering::Relaxed);
        let doomed = {
            let mut st = self.lock();
            let kept = Kept {
                bucket_dir: bucket_dir.to_path_buf(),
                obj_dir: obj_dir.to_path_buf(),
                bytes,
                last_read: Instant::now(),
            };
            st.put(id, kept);
            let mut doomed = Vec::new();
            while st.bytes > budget {
                let Some(&(_, lru)) = st.order.first() else {
                    break;
                };
                doomed.push(st.take(lru));
                OVER_BUDGET.fetch_add(1, Ordering::Relaxed);
            }
            self.count.store(st.dirs.len(), Ordering::Relaxed);
            doomed
        };
        if !doomed.is_empty() {
            debug!(
                n = doomed.len(),
                budget, "retired data over its budget; removed the least recently read"
            );
        }
        remove(doomed);
    }

    /// A shard read of the data dir `id` is under way: it stays another grace period.
    pub(super) fn touch(&self, id: Uuid) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.lock().read_now(id, Instant::now());
    }

    /// Whether the data dir `id` is retired and kept.
    pub(super) fn is_kept(&self, id: Uuid) -> bool {
        self.count.load(Ordering::Relaxed) != 0 && self.lock().dirs.contains_key(&id)
    }

    /// Removes every data dir unread for the grace as of `now`, and the object directories this
    /// leaves empty. Returns when the next one is due. Blocking.
    pub(super) fn reap(&self, now: Instant) -> Option<Instant> {
        let (doomed, next) = {
            let mut st = self.lock();
            let mut doomed = Vec::new();
            while let Some(&(last_read, id)) = st.order.first() {
                if now.saturating_duration_since(last_read) < self.grace {
                    break;
                }
                doomed.push(st.take(id));
            }
            self.count.store(st.dirs.len(), Ordering::Relaxed);
            let next = st.order.first().map(|(t, _)| *t + self.grace);
            (doomed, next)
        };
        remove(doomed);
        next
    }

    /// Bytes and count of what is kept now.
    #[cfg(test)]
    fn figures(&self) -> (u64, usize) {
        let st = self.lock();
        (st.bytes, st.dirs.len())
    }
}

impl State {
    fn put(&mut self, id: Uuid, kept: Kept) {
        let bytes = kept.bytes;
        if let Some(old) = self.dirs.remove(&id) {
            self.order.remove(&(old.last_read, id));
            self.forget(old.bytes);
        }
        self.order.insert((kept.last_read, id));
        self.dirs.insert(id, kept);
        self.bytes += bytes;
        KEPT.fetch_add(1, Ordering::Relaxed);
        KEPT_BYTES.fetch_add(bytes, Ordering::Relaxed);
    }

    fn take(&mut self, id: Uuid) -> Doomed {
        let k = self.dirs.remove(&id).expect("taken ids are kept");
        self.order.remove(&(k.last_read, id));
        self.forget(k.bytes);
        (k.bucket_dir, k.obj_dir, id)
    }

    /// The data dir `id`, if kept, was read at `now`.
    fn read_now(&mut self, id: Uuid, now: Instant) {
        if let Some(k) = self.dirs.get_mut(&id) {
            self.order.remove(&(k.last_read, id));
            k.last_read = k.last_read.max(now);
            self.order.insert((k.last_read, id));
        }
    }

    fn forget(&mut self, bytes: u64) {
        self.bytes -= bytes;
        KEPT.fetch_sub(1, Ordering::Relaxed);
        KEPT_BYTES.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl Drop for State {
    /// A drive dropped with data still kept (the orphan sweep removes it later): the process's
    /// figures no longer count it.
    fn drop(&mut self) {
        KEPT.fetch_sub(self.dirs.len() as u64, Ordering::Relaxed);
        KEPT_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

fn remove(doomed: Vec<Doomed>) {
    for (bucket_dir, obj_dir, id) in doomed {
        remove_dir_all_logged(&obj_dir.join(id.to_string()));
        // A deleted key's directory held only its retired data dirs.
        prune_empty_dirs(&bucket_dir, &obj_dir);
    }
}

/// Runs the reaper of `retired` until the drive is dropped.
pub(super) fn spawn_reaper(retired: &Arc<Retired>) {
    if retired.grace.is_zero() {
        return;
    }
    let weak = Arc::downgrade(retired);
    let grace = retired.grace;
    tokio::spawn(async move {
        let mut wait = grace;
        loop {
            tokio::time::sleep(wait).await;
            let Some(r) = weak.upgrade() else { return };
            let next = match tokio::task::spawn_blocking(move || r.reap(Instant::now())).await {
                Ok(next) => next,
                Err(_) => return, // the runtime is shutting down
            };
            wait = next.map_or(grace, |t| {
                t.saturating_duration_since(Instant::now()).max(MIN_TICK)
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn data_dir(obj_dir: &Path, id: Uuid, len: usize) {
        let d = obj_dir.join(id.to_string());
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("part.1"), vec![7u8; len]).unwrap();
    }

    #[test]
    fn a_retired_data_dir_stays_until_unread_for_the_grace() {
        let root = tempfile::tempdir().unwrap();
        let bucket = root.path().join("b");
        let obj = bucket.join("k");
        let id = Uuid::new_v4();
        data_dir(&obj, id, 100);
        let r = Retired::new(Duration::from_secs(10));
        r.retire(&bucket, &obj, id, 100);
        assert!(r.is_kept(id));
        let t0 = Instant::now();
        assert!(r.reap(t0 + Duration::from_secs(5)).is_some());
        assert!(obj.join(id.to_string()).join("part.1").exists());
        // A read at t0+8 keeps it past t0+10.
        r.lock().read_now(id, t0 + Duration::from_secs(8));
        r.touch(Uuid::new_v4()); // another id: nothing
        assert!(r.reap(t0 + Duration::from_secs(12)).is_some());
        assert!(obj.join(id.to_string()).exists());
        assert_eq!(r.reap(t0 + Duration::from_secs(19)), None);
        assert!(!r.is_kept(id));
        assert!(!obj.exists(), "the emptied object directory is pruned");
        assert!(bucket.exists(), "never the bucket");
        assert_eq!(r.figures(), (0, 0));
    }

    #[test]
    fn the_reaper_keeps_an_object_directory_that_holds_metadata() {
        let root = tempfile::tempdir().unwrap();
        let bucket = root.path().join("b");
        let obj = bucket.join("k");
        let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
        data_dir(&obj, old, 10);
        data_dir(&obj, new, 10);
        fs::write(obj.join("quarry.meta"), b"x").unwrap();
        let r = Retired::new(Duration::from_secs(1));
        r.retire(&bucket, &obj, old, 10);
        r.reap(Instant::now() + Duration::from_secs(2));
        assert!(!obj.join(old.to_string()).exists());
        assert!(obj.join(new.to_string()).join("part.1").exists());
    }

    #[test]
    fn a_data_dir_retired_twice_is_kept_once() {
        let root = tempfile::tempdir().unwrap();
        let bucket = root.path().join("b");
        let obj = bucket.join("k");
        let id = Uuid::new_v4();
        data_dir(&obj, id, 10);
        let r = Retired::new(Duration::from_secs(10));
        r.retire(&bucket, &obj, id, 10);
        r.retire(&bucket, &obj, id, 20);
        assert_eq!(r.figures(), (20, 1));
        assert_eq!(r.lock().order.len(), 1);
        assert_eq!(r.reap(Instant::now() + Duration::from_secs(11)), None);
        assert_eq!(r.figures(), (0, 0));
    }

    #[test]
    fn grace_zero_removes_at_once() {
        let root = tempfile::tempdir().unwrap();
        let bucket = root.path().join("b");
        let obj = bucket.join("k");
        let id = Uuid::new_v4();
        data_dir(&obj, id, 10);
        let r = Retired::new(Duration::ZERO);
        r.retire(&bucket, &obj, id, 10);
        assert!(!obj.join(id.to_string()).exists());
        assert!(!r.is_kept(id));
    }

    #[test]
    fn over_the_budget_the_least_recently_read_go_first() {
        let root = tempfile::tempdir().unwrap();
        let bucket = root.path().join("b");
        let obj = bucket.join("k");
        let budget = rustix::fs::statvfs(root.path())
            .map(|st| st.f_bavail * st.f_frsize / BUDGET_DIVISOR)
            .unwrap();
        let r = Retired::new(Duration::from_secs(60));
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
        for id in &ids {
            data_dir(&obj, *id, 10);
        }
        // Each counts for 40% of the budget: the third pushes out the least recently read.
        let share = budget / 5 * 2;
        r.retire(&bucket, &obj, ids[0], share);
        r.retire(&bucket, &obj, ids[1], share);
        r.lock()
            .read_now(ids[0], Instant::now() + Duration::from_secs(1));
        r.retire(&bucket, &obj, ids[2], share);
        assert!(r.is_kept(ids[0]) && r.is_kept(ids[2]));
        assert!(!r.is_kept(ids[1]));
        assert!(!obj.join(ids[1].to_string()).exists());
        assert!(obj.join(ids[0].to_string()).exists());
        // One larger than the whole budget goes at once, and alone.
        let big = Uuid::new_v4();
        data_dir(&obj, big, 10);
        r.retire(&bucket, &obj, big, budget * 2);
        assert!(!obj.join(big.to_string()).exists());
        assert!(r.is_kept(ids[0]) && r.is_kept(ids[2]));
    }
}
