//! Drive replacement: a drive formatted into the slot of a lost one (an empty directory, or one
//! without `format.json`) is healed in full in the background by the node that owns it.
//!
//! The state of that heal lives on the drive itself, in `.quarry.sys/healing.json` (versioned
//! JSON, [`HealingMark`]): it is written before the drive's `format.json` (so a drive is never
//! formatted without it), every [`CHECKPOINT_EVERY`] objects, at the end of each bucket and of
//! each phase, and removed only once a verify pass over everything found nothing left to
//! rewrite. A restart reads it and resumes after the last object it names instead of starting
//! again.
//!
//! Order of the walk: the system configuration, then the buckets in name order, each bucket's
//! own state (configuration blobs, uploads in progress) and then its keys in key order, every
//! version of each. While a drive heals, GET and HEAD do not take its copy of an object the
//! walk has not reached yet ([`ErasureSet::mask_healing`]): its position is treated as missing
//! the object, which the other drives rebuild.
//!
//! What this module does not own: the drive's directory layout (crates/disk) beyond this one
//! file; it reads and writes the file directly because only the node that owns the drive heals
//! it, and the file must not travel through the `Drive` trait's configuration blobs (those are
//! healed across the set, and this one belongs to one drive alone).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::api::HealResult;
use crate::error::{Error, Result};
use crate::heal_queue::{verdict, Verdict};
use crate::scanner::Cursor;
use crate::set::{now_ns, ErasureSet};

/// The checkpoint file, relative to the drive's root.
pub const HEALING_FILE: &str = ".quarry.sys/healing.json";
/// The checkpoint format this build writes and reads.
pub const HEALING_VERSION: u32 = 1;
/// Objects between two checkpoints.
pub const CHECKPOINT_EVERY: u64 = 16;
/// Verify passes at most before the heal gives up for this run (the marker stays; the next
/// start resumes with a verify pass).
const VERIFY_ROUNDS: u64 = 3;
/// Pause before trying again when the set cannot be listed (no read quorum yet).
const RETRY_PAUSE: Duration = Duration::from_secs(5);

/// Where a drive heal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriveHealPhase {
    /// Walking everything once, rewriting what the drive lacks.
    Healing,
    /// Walking everything again: what this pass still has to rewrite is counted as missing.
    Verifying,
    /// A verify pass found nothing missing and nothing failed: the marker is gone.
    Done,
}

/// Contents of `healing.json`, version 1: the checkpoint of one drive's heal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealingMark {
    /// Always [`HEALING_VERSION`] when written by this build.
    pub version: u32,
    /// Names this heal in logs and status (the same across restarts).
    pub job_id: String,
    /// Set index and position of the drive.
    pub set: usize,
    pub position: usize,
    pub started_ns: i64,
    pub updated_ns: i64,
    pub phase: DriveHealPhase,
    /// Whether the system configuration (IAM state and the like) was healed in this phase.
    pub system_done: bool,
    /// Buckets whose state and every object are healed in this phase, in name order.
    pub buckets_done: Vec<String>,
    /// The bucket being walked, and the last key of it that is healed.
    pub bucket: Option<String>,
    pub last_key: Option<String>,
    /// Objects checked, rewritten (on this or another drive), failed; bytes of their latest
    /// versions checked. Totals of the healing phase, across restarts.
    pub scanned: u64,
    pub healed: u64,
    pub failed: u64,
    pub bytes: u64,
    /// Bucket items (buckets, configuration blobs, uploads) rewritten.
    pub bucket_items_healed: u64,
    /// Times the heal was resumed from this file after a restart.
    pub resumes: u64,
    /// Verify passes run, and what the last one still had to rewrite or could not check.
    pub verify_rounds: u64,
    pub verify_checked: u64,
    pub verify_missing: u64,
    pub verify_failed: u64,
}

impl HealingMark {
    /// A fresh checkpoint for the drive at `(set, position)`: nothing healed yet.
    pub fn new(set: usize, position: usize) -> HealingMark {
        let now = now_ns();
        HealingMark {
            version: HEALING_VERSION,
            job_id: format!("drive-heal-{now:x}-{set}-{position}"),
            set,
            position,
            started_ns: now,
            updated_ns: now,
            phase: DriveHealPhase::Healing,
            system_done: false,
            buckets_done: Vec::new(),
            bucket: None,
            last_key: None,
            scanned: 0,
            healed: 0,
            failed: 0,
            bytes: 0,
            bucket_items_healed: 0,
            resumes: 0,
            verify_rounds: 0,
            verify_checked: 0,
            verify_missing: 0,
            verify_failed: 0,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // Plain strings and integers: serializing cannot fail.
        serde_json::to_vec_pretty(self).expect("HealingMark serializes to JSON")
    }

    /// Parses the file: the version first (an unknown one is an error, never a guess).
    pub fn from_bytes(b: &[u8]) -> Result<HealingMark> {
        #[derive(Deserialize)]
        struct Probe {
            version: u32,
        }
        let probe: Probe = serde_json::from_slice(b)
            .map_err(|e| Error::Internal(format!("{HEALING_FILE}: {e}")))?;
        if probe.version != HEALING_VERSION {
            return Err(Error::Internal(format!(
                "{HEALING_FILE}: version {} is not supported (this build reads {HEALING_VERSION})",
                probe.version
            )));
        }
        serde_json::from_slice(b).map_err(|e| Error::Internal(format!("{HEALING_FILE}: {e}")))
    }

    /// Starts the walk of a phase again from the beginning.
    fn restart_walk(&mut self, phase: DriveHealPhase) {
        self.phase = phase;
        self.system_done = false;
        self.buckets_done.clear();
        self.bucket = None;
        self.last_key = None;
    }

    /// What the walk has passed, for the read mask: `None` before the first bucket is done.
    fn healed_up_to(&self) -> HealedUpTo {
        match (&self.bucket, self.buckets_done.last()) {
            (Some(b), _) => HealedUpTo::Key(b.clone(), self.last_key.clone()),
            (None, Some(b)) => HealedUpTo::Key(b.clone(), None).whole_bucket(),
            (None, None) => HealedUpTo::Nothing,
        }
    }
}

/// How far a drive heal's walk has come (the read mask of [`ErasureSet::mask_healing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HealedUpTo {
    Nothing,
    /// Every bucket before this one, and its keys up to and including this one (`None`: none
    /// of its keys yet).
    Key(String, Option<String>),
    /// Every bucket up to and including this one.
    Bucket(String),
    /// A verify pass runs: the healing pass already went over everything.
    Everything,
}

impl HealedUpTo {
    fn whole_bucket(self) -> HealedUpTo {
        match self {
            HealedUpTo::Key(b, _) => HealedUpTo::Bucket(b),
            other => other,
        }
    }

    /// Whether the walk has healed `bucket/key`.
    pub(crate) fn covers(&self, bucket: &str, key: &str) -> bool {
        match self {
            HealedUpTo::Nothing => false,
            HealedUpTo::Everything => true,
            HealedUpTo::Bucket(b) => bucket <= b.as_str(),
            HealedUpTo::Key(b, k) => {
                bucket < b.as_str() || (bucket == b && k.as_deref().is_some_and(|k| key <= k))
            }
        }
    }
}

fn mark_path(root: &Path) -> PathBuf {
    root.join(HEALING_FILE)
}

/// Reads the drive's checkpoint, `None` when it has none.
pub fn read_mark(root: &Path) -> Result<Option<HealingMark>> {
    match std::fs::read(mark_path(root)) {
        Ok(b) => HealingMark::from_bytes(&b).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Internal(format!(
            "{}: {e}",
            mark_path(root).display()
        ))),
    }
}

/// Writes the checkpoint atomically: a temp file, synced, renamed over the old one.
pub fn write_mark(root: &Path, mark: &HealingMark) -> Result<()> {
    let path = mark_path(root);
    let err = |e: std::io::Error| Error::Internal(format!("{}: {e}", path.display()));
    let dir = path.parent().unwrap_or(root);
    std::fs::create_dir_all(dir).map_err(err)?;
    let tmp = dir.join("healing.json.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(&mark.to_bytes()).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(err)
}

fn remove_mark(root: &Path) -> Result<()> {
    match std::fs::remove_file(mark_path(root)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Internal(format!(
            "{}: {e}",
            mark_path(root).display()
        ))),
        _ => Ok(()),
    }
}

/// Marks a drive about to be formatted into `(set, position)` as healing. Called before its
/// `format.json` is written.
pub fn mark_fresh_drive(root: &Path, set: usize, position: usize) -> Result<()> {
    write_mark(root, &HealingMark::new(set, position))
}

/// A drive heal as status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveHealStatus {
    pub endpoint: String,
    pub mark: HealingMark,
}

/// One running (or finished) drive heal: where its checkpoint lives and its latest state.
#[derive(Debug)]
pub(crate) struct DriveHeal {
    root: PathBuf,
    endpoint: String,
    mark: Mutex<HealingMark>,
    /// Set when its task returned: done, or given up until the next start.
    ended: std::sync::atomic::AtomicBool,
}

impl DriveHeal {
    /// The drive's root directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Whether its task still runs.
    pub(crate) fn running(&self) -> bool {
        !self.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn status(&self) -> DriveHealStatus {
        DriveHealStatus {
            endpoint: self.endpoint.clone(),
            mark: self.mark.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    fn update(&self, f: impl FnOnce(&mut HealingMark)) -> HealingMark {
        let mut m = self.mark.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut m);
        m.updated_ns = now_ns();
        m.clone()
    }

    /// Writes the current state to the drive (a failure is logged: the heal goes on, a restart
    /// redoes a little more).
    fn checkpoint(&self) {
        let m = self.update(|_| {});
        if let Err(e) = write_mark(&self.root, &m) {
            warn!(drive = self.endpoint, error = %e, "drive heal: cannot write the checkpoint");
        }
    }
}

/// Paces a walk to at most `ops` objects and `bytes` bytes per second (0: no limit on that one).
pub(crate) struct IoBudget {
    ops: u32,
    bytes: u64,
    started: tokio::time::Instant,
    spent_ops: u64,
    spent_bytes: u64,
}

impl IoBudget {
    pub(crate) fn new(ops: u32, bytes: u64) -> IoBudget {
        IoBudget {
            ops,
            bytes,
            started: tokio::time::Instant::now(),
            spent_ops: 0,
            spent_bytes: 0,
        }
    }

    /// Counts one object of `bytes` and sleeps until the budget allows the next.
    pub(crate) async fn spend(&mut self, bytes: u64) {
        self.spent_ops += 1;
        self.spent_bytes += bytes;
        let mut due = Duration::ZERO;
        if self.ops > 0 {
            due = due.max(Duration::from_secs_f64(
                self.spent_ops as f64 / self.ops as f64,
            ));
        }
        if self.bytes > 0 {
            due = due.max(Duration::from_secs_f64(
                self.spent_bytes as f64 / self.bytes as f64,
            ));
        }
        tokio::time::sleep_until(self.started + due).await;
    }
}

/// Resumes (or starts) the heal of the local drive at `root`, `(set, position)` of `set`, if it
/// carries a checkpoint. Returns its handle for status, `None` when the drive is not healing.
pub(crate) fn resume(
    set: &Arc<ErasureSet>,
    root: PathBuf,
    set_index: usize,
    position: usize,
) -> Option<Arc<DriveHeal>> {
    let endpoint = set
        .drives
        .get(position)
        .map(|d| d.endpoint().to_owned())
        .unwrap_or_else(|| root.display().to_string());
    let mut mark = match read_mark(&root) {
        Ok(Some(m)) => m,
        Ok(None) => return None,
        Err(e) => {
            warn!(drive = endpoint, error = %e, "drive heal: unreadable checkpoint; not healing this drive (remove the file to heal it from the start)");
            return None;
        }
    };
    if (mark.set, mark.position) != (set_index, position) {
        warn!(
            drive = endpoint,
            "drive heal: the checkpoint names another position; starting over"
        );
        mark = HealingMark::new(set_index, position);
    }
    let resumed = mark.scanned > 0 || mark.system_done || !mark.buckets_done.is_empty();
    if resumed {
        mark.resumes += 1;
    }
    if mark.phase == DriveHealPhase::Verifying {
        // A verify pass proves something only whole: it starts again from the beginning.
        mark.restart_walk(DriveHealPhase::Verifying);
    }
    info!(
        drive = endpoint,
        job = mark.job_id,
        resumed,
        phase = ?mark.phase,
        buckets_done = mark.buckets_done.len(),
        bucket = mark.bucket.as_deref().unwrap_or(""),
        last_key = mark.last_key.as_deref().unwrap_or(""),
        scanned = mark.scanned,
        "drive heal: the drive was replaced; healing it in the background"
    );
    set.set_healing(position, Some(mask_of(&mark)));
    let heal = Arc::new(DriveHeal {
        root,
        endpoint,
        mark: Mutex::new(mark),
        ended: Default::default(),
    });
    heal.checkpoint();
    let (set2, heal2) = (set.clone(), heal.clone());
    set.cfg.runtime.spawn(Box::pin(async move {
        run(&set2, &heal2, position).await;
        heal2
            .ended
            .store(true, std::sync::atomic::Ordering::Release);
    }));
    Some(heal)
}

fn mask_of(mark: &HealingMark) -> HealedUpTo {
    match mark.phase {
        DriveHealPhase::Healing => mark.healed_up_to(),
        DriveHealPhase::Verifying | DriveHealPhase::Done => HealedUpTo::Everything,
    }
}

/// Runs a drive heal to its end: the healing walk (from the checkpoint), then verify walks
/// until one finds nothing to rewrite.
async fn run(set: &Arc<ErasureSet>, heal: &DriveHeal, position: usize) {
    let mut budget = IoBudget::new(set.cfg.heal_rate, set.cfg.heal_bytes_rate);
    loop {
        let phase = heal.status().mark.phase;
        match phase {
            DriveHealPhase::Healing => {
                if let Err(e) = walk(set, heal, position, &mut budget, false).await {
                    warn!(drive = heal.endpoint, error = %e, "drive heal: cannot walk the set; trying again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                heal.update(|m| m.restart_walk(DriveHealPhase::Verifying));
                set.set_healing(position, Some(HealedUpTo::Everything));
                heal.checkpoint();
            }
            DriveHealPhase::Verifying => {
                heal.update(|m| {
                    m.verify_checked = 0;
                    m.verify_missing = 0;
                    m.verify_failed = 0;
                });
                if let Err(e) = walk(set, heal, position, &mut budget, true).await {
                    warn!(drive = heal.endpoint, error = %e, "drive heal: cannot walk the set; trying again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                let m = heal.update(|m| m.verify_rounds += 1);
                if m.verify_missing == 0 && m.verify_failed == 0 {
                    heal.update(|m| m.phase = DriveHealPhase::Done);
                    if let Err(e) = remove_mark(&heal.root) {
                        warn!(drive = heal.endpoint, error = %e, "drive heal: cannot remove the checkpoint");
                    }
                    set.set_healing(position, None);
                    let m = heal.status().mark;
                    info!(
                        drive = heal.endpoint,
                        job = m.job_id,
                        scanned = m.scanned,
                        healed = m.healed,
                        failed = m.failed,
                        bytes = m.bytes,
                        bucket_items_healed = m.bucket_items_healed,
                        resumes = m.resumes,
                        verify_rounds = m.verify_rounds,
                        verify_checked = m.verify_checked,
                        verify_missing = 0,
                        secs = (m.updated_ns - m.started_ns) as f64 / 1e9,
                        "drive heal finished: a verify pass found nothing missing"
                    );
                    return;
                }
                warn!(
                    drive = heal.endpoint,
                    missing = m.verify_missing,
                    failed = m.verify_failed,
                    round = m.verify_rounds,
                    "drive heal: the verify pass still found work; verifying again"
                );
                if m.verify_rounds >= VERIFY_ROUNDS {
                    heal.checkpoint();
                    warn!(drive = heal.endpoint, "drive heal: giving up for now; the checkpoint stays and the next start verifies again");
                    return;
                }
                heal.update(|m| m.restart_walk(DriveHealPhase::Verifying));
                heal.checkpoint();
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            DriveHealPhase::Done => return,
        }
    }
}

/// Counts one heal into the mark.
fn record(m: &mut HealingMark, verify: bool, r: &Result<HealResult>, bytes: u64) {
    let rewritten = matches!(r, Ok(r) if !r.healed.is_empty());
    let failed = verdict(r) != Verdict::Done;
    if verify {
        m.verify_checked += 1;
        m.verify_missing += rewritten as u64;
        m.verify_failed += failed as u64;
    } else {
        m.scanned += 1;
        m.healed += rewritten as u64;
        m.failed += failed as u64;
        m.bytes += bytes;
    }
}

/// Counts one bucket-state heal (a bucket, its blobs and uploads) into the mark.
fn record_bucket(m: &mut HealingMark, verify: bool, r: &Result<HealResult>) {
    let items = match r {
        Ok(r) => r.healed.len() as u64,
        Err(_) => 0,
    };
    let failed = matches!(r, Ok(r) if !r.failed.is_empty()) || r.is_err();
    if verify {
        m.verify_checked += 1;
        m.verify_missing += items;
        m.verify_failed += failed as u64;
    } else {
        m.bucket_items_healed += items;
        m.failed += failed as u64;
    }
}

/// One walk over everything the set holds, from the checkpoint on.
async fn walk(
    set: &Arc<ErasureSet>,
    heal: &DriveHeal,
    position: usize,
    budget: &mut IoBudget,
    verify: bool,
) -> Result<()> {
    let start = heal.status().mark;
    if !start.system_done {
        let r = Ok(set.heal_system_configs().await);
        heal.update(|m| {
            record_bucket(m, verify, &r);
            m.system_done = true;
        });
        heal.checkpoint();
    }
    let mut buckets: Vec<String> = set
        .list_buckets()
        .await?
        .into_iter()
        .map(|b| b.name)
        .collect();
    buckets.sort();
    for b in buckets {
        if start.buckets_done.binary_search(&b).is_ok() {
            continue;
        }
        // The bucket the checkpoint was in the middle of: its state is healed already.
        let resume_after = match (&start.bucket, &start.last_key) {
            (Some(cb), k) if *cb == b => Some(k.clone()),
            _ => None,
        };
        if resume_after.is_none() {
            let r = set.heal_bucket(&b).await;
            heal.update(|m| {
                record_bucket(m, verify, &r);
                m.bucket = Some(b.clone());
                m.last_key = None;
            });
            heal.checkpoint();
        }
        let mut cursor = Cursor::new(set, Some(&b), "").await?;
        if let Some(Some(k)) = &resume_after {
            cursor.start_after(k);
        }
        let mut since_checkpoint = 0u64;
        while let Some(item) = cursor.next_sized(set).await {
            let (key, size) = match item {
                Ok((_, k, size)) => (k, size),
                Err((_, e)) => return Err(e),
            };
            let r = set.heal_object(&b, &key).await;
            let m = heal.update(|m| {
                record(m, verify, &r, size);
                m.bucket = Some(b.clone());
                m.last_key = Some(key.clone());
            });
            if !verify {
                set.set_healing(position, Some(mask_of(&m)));
            }
            since_checkpoint += 1;
            if since_checkpoint >= CHECKPOINT_EVERY {
                heal.checkpoint();
                since_checkpoint = 0;
            }
            budget.spend(size).await;
        }
        let m = heal.update(|m| {
            if let Err(i) = m.buckets_done.binary_search(&b) {
                m.buckets_done.insert(i, b.clone());
            }
            m.bucket = None;
            m.last_key = None;
        });
        if !verify {
            set.set_healing(position, Some(mask_of(&m)));
        }
        heal.checkpoint();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mark_round_trips_and_refuses_unknown_versions() {
        let mut m = HealingMark::new(1, 2);
        m.buckets_done = vec!["a".into()];
        m.bucket = Some("b".into());
        m.last_key = Some("k/1".into());
        m.scanned = 17;
        let back = HealingMark::from_bytes(&m.to_bytes()).unwrap();
        assert_eq!(back, m);
        let mut v: serde_json::Value = serde_json::from_slice(&m.to_bytes()).unwrap();
        v["version"] = 2.into();
        let e = HealingMark::from_bytes(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(e.to_string().contains("version 2"), "{e}");
        assert!(HealingMark::from_bytes(b"{garbage").is_err());
    }

    #[test]
    fn mark_file_is_written_read_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_mark(dir.path()).unwrap(), None);
        mark_fresh_drive(dir.path(), 0, 3).unwrap();
        let m = read_mark(dir.path()).unwrap().unwrap();
        assert_eq!(
            (m.set, m.position, m.phase),
            (0, 3, DriveHealPhase::Healing)
        );
        remove_mark(dir.path()).unwrap();
        assert_eq!(read_mark(dir.path()).unwrap(), None);
        remove_mark(dir.path()).unwrap();
    }

    #[test]
    fn the_read_mask_covers_exactly_what_the_walk_passed() {
        let mut m = HealingMark::new(0, 0);
        let mask = |m: &HealingMark| mask_of(m);
        assert!(!mask(&m).covers("a", "x"));
        m.buckets_done = vec!["a".into()];
        assert!(mask(&m).covers("a", "zzz"));
        assert!(!mask(&m).covers("b", ""));
        m.bucket = Some("b".into());
        assert!(mask(&m).covers("a", "zzz"));
        assert!(!mask(&m).covers("b", "k"));
        m.last_key = Some("k/5".into());
        assert!(mask(&m).covers("b", "k/5"));
        assert!(mask(&m).covers("b", "k/4"));
        assert!(!mask(&m).covers("b", "k/6"));
        assert!(!mask(&m).covers("c", "a"));
        m.phase = DriveHealPhase::Verifying;
        assert!(mask(&m).covers("c", "a"));
    }

    #[tokio::test]
    async fn the_budget_paces_objects_and_bytes() {
        let t0 = tokio::time::Instant::now();
        let mut b = IoBudget::new(100, 0);
        for _ in 0..10 {
            b.spend(0).await;
        }
        assert!(
            t0.elapsed() >= Duration::from_millis(100),
            "{:?}",
            t0.elapsed()
        );
        let t1 = tokio::time::Instant::now();
        let mut b = IoBudget::new(0, 1000);
        b.spend(200).await;
        assert!(
            t1.elapsed() >= Duration::from_millis(200),
            "{:?}",
            t1.elapsed()
        );
        // No limit: no wait, whatever the size.
        let t2 = tokio::time::Instant::now();
        let mut b = IoBudget::new(0, 0);
        b.spend(u64::MAX / 2).await;
        assert!(
            t2.elapsed() < Duration::from_millis(100),
            "{:?}",
            t2.elapsed()
        );
    }
}
