//! The orphan sweep: removes what a killed process left in object directories.
//!
//! A commit renames the data dir into the object's directory and then renames the metadata over
//! `quarry.meta`; an overwrite then removes the old data dir, a delete removes `quarry.meta` and
//! then the data dir. A kill between two of these steps leaves, in an object directory,
//! - a data dir (`<uuid>/part.<n>`) that no `quarry.meta` names;
//! - a `.quarry.tmp.*` file (the metadata being written).
//!
//! Nothing ever reads them, so no data is lost or exposed, but the space leaks. The sweep walks
//! every bucket (never `.quarry.sys`) and removes them, and the object directories this leaves
//! empty, under these rules:
//! - A data dir is a directory whose name is a UUID as Quarry writes it (lowercase, hyphenated)
//!   and whose entries are all regular files named `part.<n>`, at least one. The directory of a
//!   key segment that looks like a UUID holds `quarry.meta` or subdirectories (a key segment
//!   `part.1` is a directory too), never only part files, so no user key matches.
//! - It goes only if the `quarry.meta` beside it, read just before, names another data dir (or
//!   none, or there is no `quarry.meta`). Metadata that exists but cannot be read or parsed keeps
//!   everything in its directory.
//! - Nothing younger than the minimum age goes: the age of a data dir is that of the newest
//!   modification or status change (ctime, which a rename updates) of the directory and of each
//!   of its files, so a commit in progress (its data-dir rename and metadata rename are
//!   milliseconds apart) is never touched. Ages are checked on open file descriptors, and the
//!   files are unlinked through the same descriptor, so a data dir that a heal swaps in under the
//!   same name meanwhile is not the one emptied.
//! - Except a `.quarry.tmp.*` file changed before the process opened the drive
//!   ([`LocalDrive::open_with_sweep`]): one process serves a drive, so it is the metadata write
//!   of a process that was killed, whatever its age, and goes at the first pass after a restart
//!   (a drive heal that rewrote the object meanwhile would otherwise leave it beside the copy).
//!
//! The walk holds one open directory per level (keys have at most 512 segments) and never the
//! whole tree. Errors are logged and counted, never fatal.

use std::ffi::{CStr, CString, OsStr};
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, Dir, Mode, OFlags};
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::retired::Retired;
use super::{is_not_found, read_journal_headers, LocalDrive};
use crate::path::{part_file_name, validate_bucket, META_FILE, SYS_DIR, TMP_FILE_PREFIX};

/// The default minimum age of an orphan before the sweep removes it.
pub const DEFAULT_ORPHAN_MIN_AGE: Duration = Duration::from_secs(15 * 60);

/// The default pause between two periodic passes of the sweep.
pub const DEFAULT_ORPHAN_SWEEP_INTERVAL: Duration = Duration::from_secs(60 * 60);

/// Environment variable that overrides [`DEFAULT_ORPHAN_MIN_AGE`] for the sweep started by
/// [`LocalDrive::open`], in whole seconds (tests use a short one).
pub const ORPHAN_MIN_AGE_ENV: &str = "QUARRY_ORPHAN_MIN_AGE";

/// Deeper than any valid key can reach (1024 bytes make at most 512 segments, plus the folder
/// marker and the data dir): the walk goes no further.
const MAX_DEPTH: usize = 600;

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Orphaned data dirs removed.
    pub data_dirs: u64,
    /// Part files removed with them.
    pub part_files: u64,
    /// `.quarry.tmp.*` files removed.
    pub tmp_files: u64,
    /// Object (and prefix) directories removed because the sweep left them empty.
    pub empty_dirs: u64,
    /// Bytes of the files removed.
    pub bytes: u64,
    /// Orphans kept because they are younger than the minimum age.
    pub young: u64,
    /// Object directories left alone because their `quarry.meta` could not be read or parsed.
    pub unreadable_meta: u64,
    /// Errors met (each logged and skipped).
    pub errors: u64,
}

impl SweepReport {
    /// Whether the sweep removed anything.
    pub fn removed_any(&self) -> bool {
        self.data_dirs + self.tmp_files + self.empty_dirs > 0
    }
}

impl LocalDrive {
    /// Removes orphaned data dirs and `.quarry.tmp.*` files older than `min_age` from every
    /// bucket of this drive, and the directories this leaves empty (never a bucket directory).
    /// See the module docs of `local/orphans.rs` for the rules. Blocking: call it from a
    /// blocking thread (see [`LocalDrive::spawn_orphan_sweep`]). Never fails: errors are logged
    /// and counted in the report.
    pub fn sweep_orphans(&self, min_age: Duration) -> SweepReport {
        self.sweep_orphans_of(min_age, None)
    }

    /// [`LocalDrive::sweep_orphans`], and, whatever their age, the `.quarry.tmp.*` files last
    /// changed before `opened` (when this process opened the drive): one process serves a
    /// drive, so such a file is the metadata of a write whose process is gone (killed
    /// mid-commit), not of one in progress, as everything in `.quarry.sys/tmp` is at open.
    fn sweep_orphans_of(&self, min_age: Duration, opened: Option<SystemTime>) -> SweepReport {
        let mut sweep = Sweep {
            min_age,
            opened,
            now: SystemTime::now(),
            report: SweepReport::default(),
            buf: Vec::new(),
            retired: self.retired.clone(),
        };
        let root = self.root();
        let entries = match fs::read_dir(root) {
            Ok(e) => e,
            Err(e) => {
                sweep.error(root, &e);
                return sweep.report;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    sweep.error(root, &e);
                    continue;
                }
            };
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name == SYS_DIR || validate_bucket(name).is_err() {
                continue;
            }
            if !matches!(entry.file_type(), Ok(ft) if ft.is_dir()) {
                continue;
            }
            let bucket_dir = entry.path();
            sweep.dir(&bucket_dir, &bucket_dir, 0);
        }
        sweep.report
    }

    /// Runs [`LocalDrive::sweep_orphans`] on the blocking pool, then once more `min_age` later
    /// (so that orphans left by the crash just before this start, too young for the first pass,
    /// go as well), then every `schedule.every` (if set) for as long as the runtime runs, and
    /// logs the counts of each pass. Needs a tokio runtime.
    pub fn spawn_orphan_sweep(&self, schedule: SweepSchedule) -> tokio::task::JoinHandle<()> {
        self.spawn_orphan_sweep_of(schedule, None)
    }

    /// [`LocalDrive::spawn_orphan_sweep`] for a drive this process opened at `opened`: its
    /// passes also remove the `.quarry.tmp.*` files changed before then, young or not (see
    /// [`LocalDrive::sweep_orphans_of`]), so a start-up after a kill leaves none behind.
    pub(crate) fn spawn_orphan_sweep_of(
        &self,
        schedule: SweepSchedule,
        opened: Option<SystemTime>,
    ) -> tokio::task::JoinHandle<()> {
        let drive = self.clone();
        let SweepSchedule { min_age, every, .. } = schedule;
        tokio::spawn(async move {
            for pass in 1u64.. {
                match pass {
                    1 => {}
                    2 => tokio::time::sleep(min_age).await,
                    _ => match every {
                        Some(every) => tokio::time::sleep(every).await,
                        None => return,
                    },
                }
                let d = drive.clone();
                let r = match tokio::task::spawn_blocking(move || {
                    d.sweep_orphans_of(min_age, opened)
                })
                .await
                {
                    Ok(r) => r,
                    Err(e) => {
                        warn!(drive = %drive.root().display(), error = %e, "orphan sweep failed");
                        return;
                    }
                };
                if r.removed_any() || r.errors > 0 || r.unreadable_meta > 0 {
                    info!(drive = %drive.root().display(), pass, data_dirs = r.data_dirs,
                        part_files = r.part_files, tmp_files = r.tmp_files,
                        empty_dirs = r.empty_dirs, bytes = r.bytes, young = r.young,
                        unreadable_meta = r.unreadable_meta, errors = r.errors,
                        "orphan sweep removed leftovers of interrupted writes");
                } else {
                    debug!(drive = %drive.root().display(), pass, young = r.young,
                        "orphan sweep found nothing to remove");
                }
            }
        })
    }
}

/// When the orphan sweep of a drive runs: at open, `min_age` later, then every `every`; and how
/// long the data of replaced and deleted versions waits before it goes (`local/retired.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepSchedule {
    /// Nothing younger than this is removed.
    pub min_age: Duration,
    /// Pause between two periodic passes; `None`: only the two passes after open.
    pub every: Option<Duration>,
    /// A replaced or deleted version's data dir goes once no read has used it for this long, so
    /// GETs that began before the change finish; zero: at once.
    pub retired_grace: Duration,
}

impl Default for SweepSchedule {
    fn default() -> Self {
        SweepSchedule {
            min_age: DEFAULT_ORPHAN_MIN_AGE,
            every: Some(DEFAULT_ORPHAN_SWEEP_INTERVAL),
            retired_grace: super::DEFAULT_RETIRED_GRACE,
        }
    }
}

impl SweepSchedule {
    /// The default schedule, with the minimum age from [`ORPHAN_MIN_AGE_ENV`] if set and valid.
    pub fn from_env() -> SweepSchedule {
        SweepSchedule {
            min_age: orphan_min_age_from_env(),
            ..SweepSchedule::default()
        }
    }
}

/// The minimum age from [`ORPHAN_MIN_AGE_ENV`] if set and valid, else [`DEFAULT_ORPHAN_MIN_AGE`].
fn orphan_min_age_from_env() -> Duration {
    match std::env::var(ORPHAN_MIN_AGE_ENV) {
        Ok(s) => match s.trim().parse::<u64>() {
            Ok(secs) => Duration::from_secs(secs),
            Err(_) => {
                warn!(value = %s, "{ORPHAN_MIN_AGE_ENV} is not a whole number of seconds; using the default {}s",
                    DEFAULT_ORPHAN_MIN_AGE.as_secs());
                DEFAULT_ORPHAN_MIN_AGE
            }
        },
        Err(_) => DEFAULT_ORPHAN_MIN_AGE,
    }
}

/// What the metadata of an object directory lets the sweep remove.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Allowed {
    /// Nothing: a bucket directory, or metadata that cannot be read.
    Nothing,
    /// Every orphan except the data dirs of the key's versions (none: no metadata, or every
    /// version inline).
    AllBut(Vec<Uuid>),
}

impl Allowed {
    fn keeps(&self, id: Uuid) -> bool {
        match self {
            Allowed::Nothing => true,
            Allowed::AllBut(named) => named.contains(&id),
        }
    }
}

/// A directory that has the shape of a data dir, open, with what it holds.
struct DataDir {
    fd: File,
    parts: Vec<CString>,
    bytes: u64,
    newest: SystemTime,
}

struct Sweep {
    min_age: Duration,
    /// When this process opened the drive: a `.quarry.tmp.*` file changed before it is dead.
    opened: Option<SystemTime>,
    /// When the sweep started: anything changed after it counts as young.
    now: SystemTime,
    report: SweepReport,
    buf: Vec<u8>,
    /// The drive's retired data dirs, kept for reads under way: not orphans yet.
    retired: Arc<Retired>,
}

impl Sweep {
    fn error(&mut self, path: &Path, e: &io::Error) {
        if is_not_found(e) {
            return; // removed meanwhile
        }
        warn!(path = %path.display(), error = %e, "orphan sweep skips what it cannot read or remove");
        self.report.errors += 1;
    }

    fn is_old(&self, t: SystemTime) -> bool {
        self.now
            .duration_since(t)
            .is_ok_and(|age| age >= self.min_age)
    }

    /// What the metadata in `dir` allows removing there, read now.
    fn allowed(&mut self, dir: &Path) -> Allowed {
        let path = dir.join(META_FILE);
        match read_journal_headers(&path, &mut self.buf) {
            Ok(Ok(j)) => Allowed::AllBut(j.data_dirs().collect()),
            Ok(Err(e)) => {
                warn!(path = %path.display(), error = %e,
                    "orphan sweep keeps everything beside metadata it cannot parse");
                self.report.unreadable_meta += 1;
                Allowed::Nothing
            }
            Err(e) if is_not_found(&e) => Allowed::AllBut(Vec::new()),
            Err(e) => {
                self.error(&path, &e);
                Allowed::Nothing
            }
        }
    }

    /// Sweeps `dir` (at `depth` below the bucket directory) and what is below it; removes `dir`
    /// if that leaves it empty. Returns whether `dir` itself was removed.
    fn dir(&mut self, bucket_dir: &Path, dir: &Path, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            warn!(path = %dir.display(), "orphan sweep does not go deeper than any key can");
            return false;
        }
        let allowed = if depth == 0 {
            Allowed::Nothing
        } else {
            self.allowed(dir)
        };
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                self.error(dir, &e);
                return false;
            }
        };
        let mut removed = false;
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    self.error(dir, &e);
                    continue;
                }
            };
            let ft = match entry.file_type() {
                Ok(ft) => ft,
                Err(e) => {
                    self.error(&entry.path(), &e);
                    continue;
                }
            };
            let name = entry.file_name();
            let path = entry.path();
            if ft.is_file() {
                if name.as_bytes().starts_with(TMP_FILE_PREFIX.as_bytes())
                    && allowed != Allowed::Nothing
                {
                    removed |= self.tmp_file(&path);
                }
                continue;
            }
            if !ft.is_dir() {
                continue; // symlinks and the like are never followed
            }
            if let Some(id) = data_dir_id(&name) {
                if allowed != Allowed::Nothing && allowed.keeps(id) {
                    continue; // the data of one of the key's versions
                }
                match self.inspect(&path) {
                    Ok(Some(data)) => {
                        if allowed != Allowed::Nothing {
                            removed |= self.data_dir(dir, &path, id, data);
                        }
                        continue;
                    }
                    Ok(None) => {} // a key segment that looks like a UUID
                    Err(e) => {
                        self.error(&path, &e);
                        continue;
                    }
                }
            }
            removed |= self.dir(bucket_dir, &path, depth + 1);
        }
        if !removed || depth == 0 || dir == bucket_dir {
            return false;
        }
        match fs::remove_dir(dir) {
            Ok(()) => {
                debug!(path = %dir.display(), "orphan sweep removed an empty directory");
                self.report.empty_dirs += 1;
                true
            }
            // Still holds something (an object, another key): it stays.
            Err(_) => false,
        }
    }

    /// Removes the `.quarry.tmp.*` file at `path` if it is old enough.
    fn tmp_file(&mut self, path: &Path) -> bool {
        let md = match fs::symlink_metadata(path) {
            Ok(md) if md.is_file() => md,
            Ok(_) => return false,
            Err(e) => {
                self.error(path, &e);
                return false;
            }
        };
        let t = changed(&md);
        // Strictly older: a file of the same tick as the open may be this process's.
        let dead = self.opened.is_some_and(|opened| t < opened);
        if !dead && !self.is_old(t) {
            self.report.young += 1;
            return false;
        }
        match fs::remove_file(path) {
            Ok(()) => {
                debug!(path = %path.display(), "orphan sweep removed a temporary file");
                self.report.tmp_files += 1;
                self.report.bytes += md.len();
                true
            }
            Err(e) => {
                self.error(path, &e);
                false
            }
        }
    }

    /// Opens `path` and reads what it holds: `Some` if it has the shape of a data dir (only
    /// regular files named `part.<n>`, at least one), `None` otherwise.
    fn inspect(&mut self, path: &Path) -> io::Result<Option<DataDir>> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let fd = File::from(fd);
        let mut newest = changed(&fd.metadata()?);
        let mut parts = Vec::new();
        let mut bytes = 0u64;
        for entry in Dir::read_from(&fd)? {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            if !is_part_name(name) {
                return Ok(None);
            }
            let file = rustix::fs::openat(
                &fd,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let md = File::from(file).metadata()?;
            if !md.is_file() {
                return Ok(None);
            }
            newest = newest.max(changed(&md));
            bytes = bytes.saturating_add(md.len());
            parts.push(name.to_owned());
        }
        if parts.is_empty() {
            return Ok(None);
        }
        Ok(Some(DataDir {
            fd,
            parts,
            bytes,
            newest,
        }))
    }

    /// Removes the data dir `id` at `path` in the object directory `obj_dir`, open as `data`,
    /// if it is old enough and the metadata (read again now) does not name it.
    fn data_dir(&mut self, obj_dir: &Path, path: &Path, id: Uuid, data: DataDir) -> bool {
        if !self.is_old(data.newest) {
            self.report.young += 1;
            return false;
        }
        if self.retired.is_kept(id) {
            return false;
        }
        if self.allowed(obj_dir).keeps(id) {
            return false;
        }
        for part in &data.parts {
            match rustix::fs::unlinkat(&data.fd, part.as_c_str(), AtFlags::empty()) {
                Ok(()) => self.report.part_files += 1,
                Err(e) if e == rustix::io::Errno::NOENT => {}
                Err(e) => {
                    self.error(&path.join(OsStr::from_bytes(part.to_bytes())), &e.into());
                    return false;
                }
            }
        }
        self.report.bytes += data.bytes;
        // By name: if a heal put a new data dir of the same name in place meanwhile (the one
        // emptied above was moved aside), it is not empty and stays.
        match fs::remove_dir(path) {
            Ok(()) => {
                debug!(path = %path.display(), "orphan sweep removed a data dir");
                self.report.data_dirs += 1;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                debug!(path = %path.display(), "data dir was replaced during the sweep; kept");
                false
            }
            Err(e) => {
                self.error(path, &e);
                false
            }
        }
    }
}

/// The UUID a data dir named `name` would have: only the form Quarry writes (lowercase,
/// hyphenated).
fn data_dir_id(name: &OsStr) -> Option<Uuid> {
    let s = name.to_str()?;
    let id = Uuid::try_parse(s).ok()?;
    (id.to_string() == s).then_some(id)
}

/// Whether `name` is a part file's name as [`part_file_name`] writes it.
fn is_part_name(name: &CStr) -> bool {
    let Ok(s) = name.to_str() else { return false };
    s.strip_prefix("part.")
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| part_file_name(n) == s)
}

/// The last time the inode was modified or had its status changed (a rename changes the
/// latter); a time the platform cannot give counts as now (young).
pub(super) fn changed(md: &fs::Metadata) -> SystemTime {
    let now = SystemTime::now();
    let ctime = match (u64::try_from(md.ctime()), u32::try_from(md.ctime_nsec())) {
        (Ok(s), Ok(ns)) => UNIX_EPOCH + Duration::new(s, ns),
        _ => now,
    };
    ctime.max(md.modified().unwrap_or(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_dir_names() {
        let id = Uuid::new_v4();
        assert_eq!(data_dir_id(OsStr::new(&id.to_string())), Some(id));
        assert_eq!(
            data_dir_id(OsStr::new(&id.to_string().to_uppercase())),
            None
        );
        assert_eq!(data_dir_id(OsStr::new(&id.simple().to_string())), None);
        assert_eq!(data_dir_id(OsStr::new("a")), None);
    }

    #[test]
    fn part_names() {
        assert!(is_part_name(c"part.1"));
        assert!(is_part_name(c"part.10000"));
        assert!(!is_part_name(c"part.01"));
        assert!(!is_part_name(c"part."));
        assert!(!is_part_name(c"part.-1"));
        assert!(!is_part_name(c"part.+1"));
        assert!(!is_part_name(c"quarry.meta"));
        assert!(!is_part_name(c"part.1.tmp"));
    }
}
