//! [`LocalDrive`]: the [`Drive`] trait on a directory of the local filesystem.
//!
//! Every method validates its names (see [`crate::path`]) before it builds a path, and runs its
//! filesystem work on tokio's blocking pool.

mod bucket_config;
mod dir_cache;
mod meta_cache;
mod multipart;
mod orphans;
mod retired;
mod walk;

pub use bucket_config::{validate_config_name, MAX_BUCKET_CONFIG, SYSTEM_CONFIG};
pub use dir_cache::{ListCacheFigures, DEFAULT_BUDGET as DEFAULT_LIST_CACHE_BUDGET};
pub use orphans::{
    SweepReport, SweepSchedule, DEFAULT_ORPHAN_MIN_AGE, DEFAULT_ORPHAN_SWEEP_INTERVAL,
    ORPHAN_MIN_AGE_ENV,
};
pub use retired::{figures as retired_figures, RetiredFigures, DEFAULT_RETIRED_GRACE};

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use meta_cache::Epochs;
use quarry_buf::PooledBuf;
use tracing::{debug, warn};
use uuid::Uuid;

use crate::drive::{
    DiskInfo, Drive, DriveError, FrameRegion, Result, ShardWriter, VolInfo, WalkEntry, WalkOptions,
};
use crate::format::FormatV1;
use crate::journal::{version_name, MetaJournal};
use crate::meta::ObjectMeta;
use crate::multipart::{PartMeta, UploadMeta};
use crate::path::{
    key_rel_path, part_file_name, validate_bucket, FORMAT_FILE, META_FILE, SYS_DIR, TMP_DIR,
    TMP_FILE_PREFIX,
};

/// A drive on a local directory. Cheap to clone (the clones share nothing mutable).
#[derive(Debug, Clone)]
pub struct LocalDrive {
    root: Arc<Path>,
    endpoint: Arc<str>,
    /// The filesystem keeps directory link counts at 2 + subdirectories (see `walk`).
    leaf_opt: bool,
    /// Data dirs of replaced and deleted versions, kept for reads under way (`local/retired.rs`).
    retired: Arc<retired::Retired>,
    /// Change epochs of its keys, which listings trust kept metadata by (`local/meta_cache.rs`).
    epochs: Arc<Epochs>,
}

/// Creates the directories a drive at `root` works in (the root itself, `.quarry.sys` and its
/// `tmp`) where they are missing: at open, and when a drive replaced while the server runs is
/// formatted into its slot.
pub fn prepare_root(root: &Path) -> io::Result<()> {
    fs::create_dir_all(root.join(SYS_DIR).join(TMP_DIR))
}

impl LocalDrive {
    /// Opens the drive at `root`: creates `root` and `.quarry.sys/tmp` if missing and sweeps
    /// (deletes) every leftover in-flight write under `tmp`. Does not read or require
    /// `format.json`: see [`LocalDrive::read_format`]. Starts the orphan sweep of the buckets
    /// in the background ([`LocalDrive::spawn_orphan_sweep`]), on the default schedule with
    /// the minimum age from [`ORPHAN_MIN_AGE_ENV`] or [`DEFAULT_ORPHAN_MIN_AGE`].
    pub async fn open(root: impl Into<PathBuf>) -> Result<LocalDrive> {
        Self::open_with_sweep(root, SweepSchedule::from_env()).await
    }

    /// [`LocalDrive::open`] with the orphan sweep on `schedule` (a server's settings).
    pub async fn open_with_sweep(
        root: impl Into<PathBuf>,
        schedule: SweepSchedule,
    ) -> Result<LocalDrive> {
        let mut drive = Self::open_without_sweep(root).await?;
        drive.retired = Arc::new(retired::Retired::new(schedule.retired_grace));
        retired::spawn_reaper(&drive.retired);
        // The filesystem's own clock (a ctime lags the system clock by up to a tick): a file
        // of this process, written after this, is never older.
        let marker = drive.root.join(SYS_DIR).join(TMP_DIR).join("opened");
        let opened = blocking(move || {
            let md = fs::File::create(&marker)?.metadata()?;
            fs::remove_file(&marker)?;
            Ok(orphans::changed(&md))
        })
        .await?;
        drive.spawn_orphan_sweep_of(schedule, Some(opened));
        Ok(drive)
    }

    /// [`LocalDrive::open`] without starting the orphan sweep (tests that run it themselves).
    pub async fn open_without_sweep(root: impl Into<PathBuf>) -> Result<LocalDrive> {
        let root: PathBuf = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
        blocking(move || {
            prepare_root(&root)?;
            let tmp = root.join(SYS_DIR).join(TMP_DIR);
            sweep_tmp(&tmp)?;
            let endpoint: Arc<str> = root.display().to_string().into();
            let leaf_opt = link_count_counts_subdirs(&root);
            debug!(drive = %endpoint, leaf_opt, "opened drive");
            let epochs = Epochs::of_drive(&root);
            Ok(LocalDrive {
                root: root.into(),
                endpoint,
                leaf_opt,
                // Without the sweep's schedule, replaced data goes at once.
                retired: Arc::new(retired::Retired::new(std::time::Duration::ZERO)),
                epochs,
            })
        })
        .await
    }

    /// The drive's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads `.quarry.sys/format.json`; `Ok(None)` when the drive has never been formatted.
    pub async fn read_format(&self) -> Result<Option<FormatV1>> {
        let this = self.clone();
        blocking(move || this.read_format_sync()).await
    }

    /// Writes `.quarry.sys/format.json` atomically (temp file, fsync, rename, fsync directory).
    pub async fn write_format(&self, format: &FormatV1) -> Result<()> {
        let this = self.clone();
        let bytes = format.to_bytes();
        blocking(move || Ok(write_atomic(&this.sys_dir(), FORMAT_FILE, &bytes)?)).await
    }

    fn sys_dir(&self) -> PathBuf {
        self.root.join(SYS_DIR)
    }

    fn tmp_dir(&self) -> PathBuf {
        self.root.join(SYS_DIR).join(TMP_DIR)
    }

    fn tmp_write_dir(&self, tmp_id: Uuid) -> PathBuf {
        self.tmp_dir().join(tmp_id.to_string())
    }

    fn read_format_sync(&self) -> Result<Option<FormatV1>> {
        match fs::read(self.sys_dir().join(FORMAT_FILE)) {
            Ok(b) => FormatV1::from_bytes(&b).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Validated path of a bucket directory (which may not exist).
    fn bucket_dir(&self, bucket: &str) -> Result<PathBuf> {
        validate_bucket(bucket)?;
        Ok(self.root.join(bucket))
    }

    /// Validated paths of a bucket directory and of an object's directory in it.
    fn object_dir(&self, bucket: &str, key: &str) -> Result<(PathBuf, PathBuf)> {
        let bucket_dir = self.bucket_dir(bucket)?;
        let obj_dir = bucket_dir.join(key_rel_path(key)?);
        Ok((bucket_dir, obj_dir))
    }

    fn disk_info_sync(&self) -> Result<DiskInfo> {
        let st = rustix::fs::statvfs(&*self.root).map_err(io::Error::from)?;
        // A drive without its format file is not the drive that was formatted (unmounted,
        // wiped or replaced): it is not online until the object layer formats it again.
        let id = match self.read_format_sync()? {
            Some(f) => f.drive_id,
            None => {
                return Err(DriveError::Unusable(format!(
                    "{} has no format.json",
                    self.endpoint
                )))
            }
        };
        Ok(DiskInfo {
            endpoint: self.endpoint.to_string(),
            id: Some(id),
            total: st.f_blocks.saturating_mul(st.f_frsize),
            free: st.f_bavail.saturating_mul(st.f_frsize),
        })
    }

    fn make_volume_sync(&self, bucket: &str) -> Result<()> {
        let dir = self.bucket_dir(bucket)?;
        match fs::create_dir(&dir) {
            // Configuration left by an earlier bucket of this name (a crash mid-delete) goes.
            Ok(()) => self.clear_bucket_configs(bucket)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(DriveError::VolumeExists)
            }
            Err(e) => return Err(e.into()),
        }
        fsync_dir(&self.root)?;
        Ok(())
    }

    fn list_volumes_sync(&self) -> Result<Vec<VolInfo>> {
        let mut vols = Vec::new();
        for entry in fs::read_dir(&self.root)? {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if validate_bucket(&name).is_err() {
                continue; // .quarry.sys, or a name no bucket can have
            }
            let md = match entry.metadata() {
                Ok(md) => md,
                Err(e) if is_not_found(&e) => continue, // deleted meanwhile
                Err(e) => return Err(e.into()),
            };
            vols.push(VolInfo {
                name,
                created_ns: created_ns(&md),
            });
        }
        vols.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(vols)
    }

    fn stat_volume_sync(&self, bucket: &str) -> Result<VolInfo> {
        let dir = self.bucket_dir(bucket)?;
        match fs::metadata(&dir) {
            Ok(md) if md.is_dir() => Ok(VolInfo {
                name: bucket.to_owned(),
                created_ns: created_ns(&md),
            }),
            Ok(_) => Err(volume_not_found(&dir)),
            Err(e) if is_not_found(&e) => Err(volume_not_found(&dir)),
            Err(e) => Err(e.into()),
        }
    }

    fn delete_volume_sync(&self, bucket: &str, force: bool) -> Result<()> {
        let dir = self.bucket_dir(bucket)?;
        check_bucket(&dir)?;
        if force {
            // Move the bucket out of sight first, so it disappears at once; a crash while the
            // tree is being removed leaves it in tmp, where the start-up sweep finishes the job.
            let trash = self.tmp_write_dir(Uuid::new_v4());
            let target = match fs::rename(&dir, &trash) {
                Ok(()) => trash,
                Err(e) if is_not_found(&e) => return Err(volume_not_found(&dir)),
                Err(e) => {
                    debug!(error = %e, "cannot move bucket to tmp; deleting in place");
                    dir
                }
            };
            fsync_dir(&self.root)?;
            self.clear_bucket_configs(bucket)?;
            return match fs::remove_dir_all(&target) {
                Err(e) if !is_not_found(&e) => Err(e.into()),
                _ => Ok(()),
            };
        }
        if tree_has_object(&dir)? {
            return Err(DriveError::VolumeNotEmpty);
        }
        clear_tree_without_objects(&dir)?;
        match fs::remove_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                return Err(DriveError::VolumeNotEmpty)
            }
            Err(e) if is_not_found(&e) => return Err(volume_not_found(&dir)),
            Err(e) => return Err(e.into()),
        }
        fsync_dir(&self.root)?;
        self.clear_bucket_configs(bucket)?;
        Ok(())
    }

    fn read_meta_sync(&self, bucket: &str, key: &str) -> Result<ObjectMeta> {
        let (bucket_dir, obj_dir) = self.object_dir(bucket, key)?;
        match read_latest(&obj_dir.join(META_FILE)) {
            Ok(r) => r,
            Err(e) if is_not_found(&e) => Err(not_found(&bucket_dir)),
            Err(e) => Err(e.into()),
        }
    }

    /// The whole journal of the key; `FileNotFound` (or `VolumeNotFound`) when it has none.
    fn read_journal_sync(&self, bucket: &str, key: &str) -> Result<(PathBuf, MetaJournal)> {
        let (bucket_dir, obj_dir) = self.object_dir(bucket, key)?;
        match fs::read(obj_dir.join(META_FILE)) {
            Ok(b) => Ok((obj_dir, MetaJournal::from_shared(b.into())?)),
            Err(e) if is_not_found(&e) => Err(not_found(&bucket_dir)),
            Err(e) => Err(e.into()),
        }
    }

    fn read_version_sync(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<Uuid>,
    ) -> Result<ObjectMeta> {
        let (_, journal) = self.read_journal_sync(bucket, key)?;
        journal
            .into_versions()
            .into_iter()
            .find(|v| v.version_id == version_id)
            .ok_or(DriveError::FileNotFound)
    }

    fn read_versions_sync(&self, bucket: &str, key: &str) -> Result<Vec<ObjectMeta>> {
        let (bucket_dir, obj_dir) = self.object_dir(bucket, key)?;
        match read_journal_headers(&obj_dir.join(META_FILE), &mut Vec::new()) {
            Ok(r) => Ok(r?.into_versions()),
            Err(e) if is_not_found(&e) => Err(not_found(&bucket_dir)),
            Err(e) => Err(e.into()),
        }
    }

    fn write_meta_sync(&self, bucket: &str, key: &str, meta: &ObjectMeta) -> Result<()> {
        let _changing = self.epochs.changing(bucket, key);
        let (obj_dir, mut journal) = self.read_journal_sync(bucket, key)?;
        if journal.get(meta.version_id).is_none() {
            return Err(DriveError::FileNotFound);
        }
        journal.insert(meta.clone());
        write_atomic(&obj_dir, META_FILE, &journal.to_bytes())?;
        Ok(())
    }

    fn delete_version_sync(&self, bucket: &str, key: &str, version_id: Option<Uuid>) -> Result<()> {
        let _changing = self.epochs.changing(bucket, key);
        let (obj_dir, mut journal) = self.read_journal_sync(bucket, key)?;
        let removed = journal.remove(version_id).ok_or(DriveError::FileNotFound)?;
        if journal.is_empty() {
            // The last version: the key goes, as a whole delete does.
            return self.delete_object_sync(bucket, key);
        }
        write_atomic(&obj_dir, META_FILE, &journal.to_bytes())?;
        if let Some(d) = removed.data_dir.filter(|d| !journal.uses_data_dir(*d)) {
            let bucket_dir = self.bucket_dir(bucket)?;
            self.retired
                .retire(&bucket_dir, &obj_dir, d, shard_bytes(&removed));
        }
        debug!(bucket, key, version = %version_name(version_id), "version deleted");
        Ok(())
    }

    fn create_shard_writer_sync(
        &self,
        tmp_id: Uuid,
        data_dir: Uuid,
        part: u32,
    ) -> Result<LocalShardWriter> {
        // Create only the two levels below `.quarry.sys/tmp`: if the drive's own directories
        // are gone (unmounted, removed), the write fails instead of re-creating the drive root
        // on whatever filesystem is underneath.
        let write_dir = self.tmp_write_dir(tmp_id);
        let dir = write_dir.join(data_dir.to_string());
        for d in [&write_dir, &dir] {
            match fs::create_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) if is_not_found(&e) => {
                    return Err(DriveError::Unusable(format!(
                        "{} is missing: the drive is not mounted or was removed",
                        self.tmp_dir().display()
                    )))
                }
                Err(e) => return Err(e.into()),
            }
        }
        let path = dir.join(part_file_name(part));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        Ok(LocalShardWriter {
            file: Some(file),
            buf: Vec::new(),
            path,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn read_shard_sync(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Bytes> {
        let mut buf = vec![0u8; len];
        self.read_shard_at(bucket, key, data_dir, part, offset, &mut buf)?;
        Ok(Bytes::from(buf))
    }

    /// Fills `buf` from `offset` of the shard file.
    fn read_shard_at(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let file = self.open_shard_range(bucket, key, data_dir, part, offset, buf.len())?;
        read_exact_at(&file, buf, offset)
    }

    /// The bucket's directory and the path of `<bucket>/<key>/<data_dir>/part.<part>`.
    fn part_path(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
    ) -> Result<(PathBuf, PathBuf)> {
        let (bucket_dir, obj_dir) = self.object_dir(bucket, key)?;
        let path = obj_dir
            .join(data_dir.to_string())
            .join(part_file_name(part));
        Ok((bucket_dir, path))
    }

    /// Opens a part file and checks that it holds `len` bytes at `offset`.
    fn open_shard_range(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<File> {
        let (bucket_dir, path) = self.part_path(bucket, key, data_dir, part)?;
        self.retired.touch(data_dir);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if is_not_found(&e) => return Err(not_found(&bucket_dir)),
            Err(e) => return Err(e.into()),
        };
        let file_len = file.metadata()?.len();
        match offset.checked_add(len as u64) {
            Some(end) if end <= file_len => Ok(file),
            _ => Err(DriveError::Truncated {
                offset,
                wanted: len,
                len: file_len,
            }),
        }
    }

    fn frame_region_sync(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Option<FrameRegion>> {
        let Some(chunk_len) = len.checked_sub(crate::FRAME_HASH_LEN) else {
            return Ok(None);
        };
        let file = self.open_shard_range(bucket, key, data_dir, part, offset, len)?;
        let mut hash = [0; crate::FRAME_HASH_LEN];
        read_exact_at(&file, &mut hash, offset)?;
        let chunk = offset + crate::FRAME_HASH_LEN as u64;
        if !in_page_cache(&file, chunk, chunk_len) {
            return Ok(None);
        }
        Ok(Some(FrameRegion {
            hash,
            file,
            offset: chunk,
            len: chunk_len,
        }))
    }

    fn rename_data_sync(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<()> {
        let _changing = self.epochs.changing(bucket, key);
        let bucket_dir = self.bucket_dir(bucket)?;
        let rel = key_rel_path(key)?;
        let obj_dir = bucket_dir.join(&rel);
        let tmp_root = self.tmp_write_dir(tmp_id);
        let data = match meta.data_dir {
            Some(d) => {
                let src = tmp_root.join(d.to_string());
                match fsync_dir(&src) {
                    Ok(()) => {}
                    Err(e) if is_not_found(&e) => {
                        warn!(%tmp_id, data_dir = %d, "data dir to commit is missing from tmp");
                        return Err(DriveError::FileNotFound);
                    }
                    Err(e) => return Err(e.into()),
                }
                Some((d, src))
            }
            None => None,
        };
        // Until the data dir or the metadata is in the object's directory, that directory and
        // those it was made in may be empty, and a delete of a neighbouring key prunes empty
        // directories: before or after they are made (a mkdir or fsync in create_dirs fails),
        // or before the first entry lands. Then the commit starts again.
        let mut attempt = 0;
        // A data dir of the same name that was already in place (a heal rewriting the shards
        // of the version it repairs), moved aside into tmp.
        let mut replaced: Option<PathBuf> = None;
        let (replaced_version, journal) = loop {
            check_bucket(&bucket_dir)?;
            let r = (|| {
                create_dirs(&bucket_dir, &rel, &obj_dir)?;
                let mut journal = read_journal_for_update(&obj_dir);
                let old = journal.insert(meta.clone());
                let bytes = journal.to_bytes();
                if let Some((d, src)) = &data {
                    // The data dir and the metadata are entries of the same directory, and
                    // write_atomic fsyncs that directory after its rename: one fsync covers both.
                    let dst = obj_dir.join(d.to_string());
                    match fs::rename(src, &dst) {
                        Ok(()) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::AlreadyExists
                            ) =>
                        {
                            let aside = self.tmp_write_dir(Uuid::new_v4());
                            fs::rename(&dst, &aside)?;
                            replaced = Some(aside);
                            fs::rename(src, &dst)?;
                        }
                        Err(e) => return Err(e),
                    }
                }
                write_atomic(&obj_dir, META_FILE, &bytes)?;
                Ok((old, journal))
            })();
            match r {
                Ok(done) => break done,
                Err(e) if is_not_found(&e) && attempt < 3 && !obj_dir.is_dir() => {
                    debug!(error = %e, attempt, "object directory vanished during commit; retrying");
                    attempt += 1;
                }
                Err(e) => return Err(e.into()),
            }
        };
        // The data dir of the version this write replaced (the same version id), unless a
        // version still names it: retired, for GETs that are reading it.
        if let Some((old, v)) = replaced_version
            .and_then(|v| Some((v.data_dir?, v)))
            .filter(|(old, _)| !journal.uses_data_dir(*old))
        {
            self.retired
                .retire(&bucket_dir, &obj_dir, old, shard_bytes(&v));
        }
        if let Some(aside) = replaced {
            remove_dir_all_logged(&aside);
        }
        remove_dir_all_logged(&tmp_root);
        Ok(())
    }

    fn delete_object_sync(&self, bucket: &str, key: &str) -> Result<()> {
        let _changing = self.epochs.changing(bucket, key);
        let (bucket_dir, obj_dir) = self.object_dir(bucket, key)?;
        let meta_path = obj_dir.join(META_FILE);
        let data_dirs: Vec<(Uuid, u64)> = match read_journal_headers(&meta_path, &mut Vec::new()) {
            Ok(Ok(j)) => j
                .versions()
                .iter()
                .filter_map(|v| Some((v.data_dir?, shard_bytes(v))))
                .collect(),
            Ok(Err(e)) => {
                warn!(path = %meta_path.display(), error = %e,
                    "deleting an object whose metadata cannot be read; its data dirs stay");
                Vec::new()
            }
            Err(e) if is_not_found(&e) => return Err(not_found(&bucket_dir)),
            Err(e) => return Err(e.into()),
        };
        match fs::remove_file(&meta_path) {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => return Err(DriveError::FileNotFound),
            Err(e) => return Err(e.into()),
        }
        // A delete of a key below this one may prune the directory as soon as the metadata is
        // out of it.
        fsync_dir_or_ancestor(&obj_dir, &bucket_dir)?;
        // Retired, for GETs that are reading them; the directory is pruned once they go.
        for (d, bytes) in data_dirs {
            self.retired.retire(&bucket_dir, &obj_dir, d, bytes);
        }
        prune_empty_dirs(&bucket_dir, &obj_dir);
        Ok(())
    }

    fn walk_sync(
        &self,
        bucket: &str,
        opts: &WalkOptions,
        max_bytes: usize,
    ) -> Result<(Vec<WalkEntry>, bool)> {
        let dir = self.bucket_dir(bucket)?;
        check_bucket(&dir)?;
        let (entries, _, stopped) =
            walk::walk_bounded(&dir, bucket, &self.epochs, opts, self.leaf_opt, max_bytes)?;
        Ok((entries, stopped))
    }
}

/// `read_exact_at`, a file shorter than the range read being [`DriveError::Truncated`].
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> Result<()> {
    match file.read_exact_at(buf, offset) {
        Ok(()) => Ok(()),
        // Shrunk since its length was checked.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(DriveError::Truncated {
            offset,
            wanted: buf.len(),
            len: file.metadata()?.len(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// The pages [`in_page_cache`] looks at are this far apart.
const RESIDENCY_PROBE_STRIDE: usize = 256 << 10;

/// Whether `len` bytes at `offset` of `file` are (most likely) in the page cache: one byte of
/// every [`RESIDENCY_PROBE_STRIDE`] bytes, and the last, is read without waiting for the disk
/// (`RWF_NOWAIT`, which fails rather than wait). A range written at once is cached or evicted
/// mostly as a whole, so a sample is enough to keep a `sendfile` of it from waiting on the disk
/// in the sender's event loop in all but rare cases. tmpfs, which refuses `RWF_NOWAIT`, holds
/// its files in memory; any other file system that refuses it, or a kernel without it (before
/// 4.14), says no.
fn in_page_cache(file: &File, offset: u64, len: usize) -> bool {
    use rustix::io::{preadv2, Errno, ReadWriteFlags};
    /// `TMPFS_MAGIC` of `statfs(2)`.
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    if len == 0 {
        return true;
    }
    let mut byte = [0u8; 1];
    let probes = (0..len)
        .step_by(RESIDENCY_PROBE_STRIDE)
        .chain(std::iter::once(len - 1));
    for at in probes {
        let mut bufs = [io::IoSliceMut::new(&mut byte)];
        match preadv2(file, &mut bufs, offset + at as u64, ReadWriteFlags::NOWAIT) {
            Ok(1) => {}
            Err(Errno::OPNOTSUPP) => {
                return rustix::fs::fstatfs(file).is_ok_and(|s| s.f_type as u64 == TMPFS_MAGIC)
            }
            _ => return false,
        }
    }
    true
}

#[async_trait]
impl Drive for LocalDrive {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn disk_info(&self) -> Result<DiskInfo> {
        let this = self.clone();
        blocking(move || this.disk_info_sync()).await
    }

    async fn read_format(&self) -> Result<Option<FormatV1>> {
        LocalDrive::read_format(self).await
    }

    async fn write_format(&self, format: &FormatV1) -> Result<()> {
        LocalDrive::write_format(self, format).await
    }

    async fn make_volume(&self, bucket: &str) -> Result<()> {
        let (this, bucket) = (self.clone(), bucket.to_owned());
        blocking(move || this.make_volume_sync(&bucket)).await
    }

    async fn list_volumes(&self) -> Result<Vec<VolInfo>> {
        let this = self.clone();
        blocking(move || this.list_volumes_sync()).await
    }

    async fn stat_volume(&self, bucket: &str) -> Result<VolInfo> {
        let (this, bucket) = (self.clone(), bucket.to_owned());
        blocking(move || this.stat_volume_sync(&bucket)).await
    }

    async fn delete_volume(&self, bucket: &str, force: bool) -> Result<()> {
        let (this, bucket) = (self.clone(), bucket.to_owned());
        blocking(move || {
            let r = this.delete_volume_sync(&bucket, force);
            this.epochs.changed_all(); // its keys' directories are gone, some or all
            r
        })
        .await
    }

    async fn read_meta(&self, bucket: &str, key: &str) -> Result<ObjectMeta> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        blocking(move || this.read_meta_sync(&bucket, &key)).await
    }

    async fn read_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<Uuid>,
    ) -> Result<ObjectMeta> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        blocking(move || this.read_version_sync(&bucket, &key, version_id)).await
    }

    async fn read_versions(&self, bucket: &str, key: &str) -> Result<Vec<ObjectMeta>> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        blocking(move || this.read_versions_sync(&bucket, &key)).await
    }

    async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<Uuid>,
    ) -> Result<()> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        blocking(move || this.delete_version_sync(&bucket, &key, version_id)).await
    }

    async fn write_meta(&self, bucket: &str, key: &str, meta: &ObjectMeta) -> Result<()> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        let meta = meta.clone();
        blocking(move || this.write_meta_sync(&bucket, &key, &meta)).await
    }

    async fn create_shard_writer(
        &self,
        tmp_id: Uuid,
        data_dir: Uuid,
        part: u32,
    ) -> Result<Box<dyn ShardWriter>> {
        let this = self.clone();
        let w = blocking(move || this.create_shard_writer_sync(tmp_id, data_dir, part)).await?;
        Ok(Box::new(w))
    }

    async fn read_shard(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Bytes> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        blocking(move || this.read_shard_sync(&bucket, &key, data_dir, part, offset, len)).await
    }

    async fn read_shard_into(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        mut buf: PooledBuf,
    ) -> Result<PooledBuf> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        blocking(move || {
            this.read_shard_at(&bucket, &key, data_dir, part, offset, &mut buf)?;
            Ok(buf)
        })
        .await
    }

    async fn frame_region(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Option<FrameRegion>> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        blocking(move || this.frame_region_sync(&bucket, &key, data_dir, part, offset, len)).await
    }

    async fn stat_shard(&self, bucket: &str, key: &str, data_dir: Uuid, part: u32) -> Result<u64> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        blocking(move || {
            let (bucket_dir, path) = this.part_path(&bucket, &key, data_dir, part)?;
            match fs::metadata(&path) {
                Ok(m) => Ok(m.len()),
                Err(e) if is_not_found(&e) => Err(not_found(&bucket_dir)),
                Err(e) => Err(e.into()),
            }
        })
        .await
    }

    async fn rename_data(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<()> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        let meta = meta.clone();
        blocking(move || this.rename_data_sync(tmp_id, &bucket, &key, &meta)).await
    }

    async fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        let (this, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        blocking(move || this.delete_object_sync(&bucket, &key)).await
    }

    async fn delete_tmp(&self, tmp_id: Uuid) -> Result<()> {
        let dir = self.tmp_write_dir(tmp_id);
        blocking(move || match fs::remove_dir_all(&dir) {
            Err(e) if !is_not_found(&e) => Err(e.into()),
            _ => Ok(()),
        })
        .await
    }

    async fn walk(&self, bucket: &str, opts: &WalkOptions) -> Result<Vec<WalkEntry>> {
        let (this, bucket, opts) = (self.clone(), bucket.to_owned(), opts.clone());
        blocking(move || this.walk_sync(&bucket, &opts, usize::MAX).map(|(e, _)| e)).await
    }

    async fn walk_bounded(
        &self,
        bucket: &str,
        opts: &WalkOptions,
        max_bytes: usize,
    ) -> Result<(Vec<WalkEntry>, bool)> {
        let (this, bucket, opts) = (self.clone(), bucket.to_owned(), opts.clone());
        blocking(move || this.walk_sync(&bucket, &opts, max_bytes)).await
    }

    // Multipart uploads: the work is in local/multipart.rs.

    async fn create_upload(&self, meta: &UploadMeta) -> Result<()> {
        let (this, meta) = (self.clone(), meta.clone());
        blocking(move || this.create_upload_sync(&meta)).await
    }

    async fn read_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<UploadMeta> {
        let (this, b, k, u) = self.upload_names(bucket, key, upload_id);
        blocking(move || this.read_upload_sync(&b, &k, &u)).await
    }

    async fn commit_part(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part: &PartMeta,
    ) -> Result<()> {
        let (this, b, k, u) = self.upload_names(bucket, key, upload_id);
        let part = part.clone();
        blocking(move || this.commit_part_sync(tmp_id, &b, &k, &u, &part)).await
    }

    async fn list_parts(&self, bucket: &str, key: &str, upload_id: &str) -> Result<Vec<PartMeta>> {
        let (this, b, k, u) = self.upload_names(bucket, key, upload_id);
        blocking(move || this.list_parts_sync(&b, &k, &u)).await
    }

    async fn stage_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[PartMeta],
        tmp_id: Uuid,
        data_dir: Uuid,
    ) -> Result<()> {
        let (this, b, k, u) = self.upload_names(bucket, key, upload_id);
        let parts = parts.to_vec();
        blocking(move || this.stage_parts_sync(&b, &k, &u, &parts, tmp_id, data_dir)).await
    }

    async fn read_part_shard(
        &self,
        upload: (&str, &str, &str),
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Bytes> {
        let (this, b, k, u) = self.upload_names(upload.0, upload.1, upload.2);
        blocking(move || {
            this.read_part_shard_sync((&b, &k, &u), data_dir, part, offset, len)
                .map(Bytes::from)
        })
        .await
    }

    async fn delete_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()> {
        let (this, b, k, u) = self.upload_names(bucket, key, upload_id);
        blocking(move || this.delete_upload_sync(&b, &k, &u)).await
    }

    async fn list_uploads(&self, bucket: Option<&str>) -> Result<Vec<UploadMeta>> {
        let (this, bucket) = (self.clone(), bucket.map(str::to_owned));
        blocking(move || this.list_uploads_sync(bucket.as_deref())).await
    }

    async fn read_bucket_config(&self, bucket: &str, name: &str) -> Result<Bytes> {
        let (this, bucket, name) = (self.clone(), bucket.to_owned(), name.to_owned());
        blocking(move || {
            this.read_bucket_config_sync(&bucket, &name)
                .map(Bytes::from)
        })
        .await
    }

    async fn write_bucket_config(&self, bucket: &str, name: &str, data: &[u8]) -> Result<()> {
        let (this, bucket, name) = (self.clone(), bucket.to_owned(), name.to_owned());
        let data = data.to_vec();
        blocking(move || this.write_bucket_config_sync(&bucket, &name, &data)).await
    }

    async fn delete_bucket_config(&self, bucket: &str, name: &str) -> Result<()> {
        let (this, bucket, name) = (self.clone(), bucket.to_owned(), name.to_owned());
        blocking(move || this.delete_bucket_config_sync(&bucket, &name)).await
    }

    async fn list_bucket_configs(&self, bucket: &str) -> Result<Vec<String>> {
        let (this, bucket) = (self.clone(), bucket.to_owned());
        blocking(move || this.list_bucket_configs_sync(&bucket)).await
    }
}

/// Writes below this many buffered bytes wait for more before going to the blocking pool.
const SHARD_FLUSH_AT: usize = 256 * 1024;

/// A shard file under tmp. Small writes are gathered in `buf`; the file and the buffer move to
/// the blocking pool for each flush and come back with its result.
struct LocalShardWriter {
    /// `None` only after a flush task panicked.
    file: Option<File>,
    buf: Vec<u8>,
    path: PathBuf,
}

impl LocalShardWriter {
    async fn flush_buf(&mut self, sync: bool) -> Result<()> {
        let file = self.file.take().ok_or_else(|| {
            DriveError::Io(io::Error::other(format!(
                "shard writer for {} failed earlier",
                self.path.display()
            )))
        })?;
        let mut buf = std::mem::take(&mut self.buf);
        let (file, buf, r) = tokio::task::spawn_blocking(move || {
            let mut r = (&file).write_all(&buf);
            if r.is_ok() && sync {
                r = file.sync_all();
            }
            buf.clear();
            (file, buf, r)
        })
        .await
        .map_err(join_error)?;
        self.file = Some(file);
        self.buf = buf;
        Ok(r?)
    }
}

#[async_trait]
impl ShardWriter for LocalShardWriter {
    async fn write(&mut self, data: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= SHARD_FLUSH_AT {
            self.flush_buf(false).await?;
        }
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<()> {
        self.flush_buf(true).await
    }
}

/// Runs filesystem work on tokio's blocking pool.
async fn blocking<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(join_error)?
}

fn join_error(e: tokio::task::JoinError) -> DriveError {
    DriveError::Io(io::Error::other(format!("drive task failed: {e}")))
}

/// Missing file or a path component that is not a directory: the name does not exist here.
fn is_not_found(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// The error for a missing object file: `VolumeNotFound` if the bucket itself is missing.
fn not_found(bucket_dir: &Path) -> DriveError {
    if bucket_dir.is_dir() {
        DriveError::FileNotFound
    } else {
        volume_not_found(bucket_dir)
    }
}

/// The error for a missing bucket directory: `VolumeNotFound`, unless the drive itself is gone
/// (its system directory is missing: unmounted or removed), which must count as an offline
/// drive and never as a drive that positively says "no such bucket".
fn volume_not_found(bucket_dir: &Path) -> DriveError {
    match bucket_dir.parent() {
        Some(root) if !root.join(SYS_DIR).is_dir() => DriveError::Unusable(format!(
            "{} has no {SYS_DIR}: the drive is not mounted or was removed",
            root.display()
        )),
        _ => DriveError::VolumeNotFound,
    }
}

fn check_bucket(bucket_dir: &Path) -> Result<()> {
    match fs::metadata(bucket_dir) {
        Ok(md) if md.is_dir() => Ok(()),
        Ok(_) => Err(volume_not_found(bucket_dir)),
        Err(e) if is_not_found(&e) => Err(volume_not_found(bucket_dir)),
        Err(e) => Err(e.into()),
    }
}

fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// fsyncs `dir`, or, when a concurrent prune has removed it once this thread's change left it
/// empty (and perhaps its parents with it), the nearest ancestor still there, up to `top`: the
/// removals are entries of that directory.
fn fsync_dir_or_ancestor(dir: &Path, top: &Path) -> io::Result<()> {
    let mut cur = dir;
    loop {
        match fsync_dir(cur) {
            Err(e) if is_not_found(&e) && cur != top => match cur.parent() {
                Some(p) if p.starts_with(top) => cur = p,
                _ => return Err(e),
            },
            r => return r,
        }
    }
}

/// Sets the bound, in bytes, of each of the process's two listing caches: large directories'
/// sorted listings (over it, the least recently used are dropped) and objects' metadata (a full
/// shard drops what no walk used in the last 30-60 s, else keeps nothing new). 0 keeps nothing.
pub fn set_list_cache_budget(bytes: usize) {
    dir_cache::set_budget(bytes);
    meta_cache::set_budget(bytes);
}

/// What the listing caches did since start, and what they hold.
pub fn list_cache_figures() -> ListCacheFigures {
    let mut f = dir_cache::figures();
    meta_cache::add_figures(&mut f);
    f
}

/// Replaces `dir/name` with `bytes` atomically and durably: a temp file in the same directory,
/// fsync, rename over `name`, fsync the directory.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{TMP_FILE_PREFIX}{}", Uuid::new_v4()));
    let r = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(name))?;
        fsync_dir(dir)
    })();
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r
}

/// Creates `base/rel` (`full`), fsyncing the parent of every directory it creates.
fn create_dirs(base: &Path, rel: &Path, full: &Path) -> io::Result<()> {
    if full.is_dir() {
        return Ok(());
    }
    let mut cur = base.to_path_buf();
    for comp in rel.components() {
        let parent = cur.clone();
        cur.push(comp);
        match fs::create_dir(&cur) {
            Ok(()) => fsync_dir(&parent)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The journal in `obj_dir` that a commit adds its version to: empty if there is none, or if it
/// cannot be read (logged: the versions it held are lost on this drive, and their data dirs stay
/// behind for the orphan sweep; heal brings the versions back from the other drives).
fn read_journal_for_update(obj_dir: &Path) -> MetaJournal {
    let path = obj_dir.join(META_FILE);
    match fs::read(&path) {
        Ok(b) => match MetaJournal::from_shared(b.into()) {
            Ok(j) => j,
            Err(e) => {
                warn!(path = %path.display(), error = %e,
                    "overwriting unreadable metadata; its data dirs stay behind");
                MetaJournal::new()
            }
        },
        Err(e) if is_not_found(&e) => MetaJournal::new(),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "cannot read the metadata being replaced");
            MetaJournal::new()
        }
    }
}

/// Reads every version's header in the metadata file at `path` (the whole file; inline data
/// are skipped). I/O errors (including a missing file) are the outer error, decoding errors the
/// inner one.
fn read_journal_headers(path: &Path, buf: &mut Vec<u8>) -> io::Result<Result<MetaJournal>> {
    buf.clear();
    File::open(path)?.read_to_end(buf)?;
    Ok(MetaJournal::from_bytes_without_inline(buf))
}

/// Reads the latest version in the metadata file at `path`, with its inline data, reading only
/// the first entry of the journal: the cost does not grow with the number of versions.
fn read_latest(path: &Path) -> io::Result<Result<ObjectMeta>> {
    let mut f = File::open(path)?;
    let mut buf = Vec::new();
    read_up_to(&mut f, &mut buf, META_HEAD)?;
    let len = match ObjectMeta::entry_len(&buf) {
        Ok(n) => n,
        Err(_) if ObjectMeta::header_incomplete(&buf) => {
            f.read_to_end(&mut buf)?;
            match ObjectMeta::entry_len(&buf) {
                Ok(n) => n,
                Err(e) => return Ok(Err(e)),
            }
        }
        Err(e) => return Ok(Err(e)),
    };
    if len > buf.len() {
        read_up_to(&mut f, &mut buf, len)?;
    }
    Ok(ObjectMeta::first_entry(Bytes::from(buf)))
}

/// Reads from `f` until `buf` holds `len` bytes or the file ends.
fn read_up_to(f: &mut File, buf: &mut Vec<u8>, len: usize) -> io::Result<()> {
    let have = buf.len();
    if len > have {
        f.take((len - have) as u64).read_to_end(buf)?;
    }
    Ok(())
}

/// How much of a metadata file is read first when only its header is wanted; headers are
/// usually well under 1 KiB.
const META_HEAD: usize = 4096;

/// Reads the header of the metadata file at `path` (not its inline data), reading only the
/// first [`META_HEAD`] bytes unless the header is longer. I/O errors (including a missing
/// file) are the outer error, decoding errors the inner one.
fn read_meta_header(path: &Path, buf: &mut Vec<u8>) -> io::Result<Result<ObjectMeta>> {
    read_meta_header_from(File::open(path)?, buf)
}

/// [`read_meta_header`] of a metadata file already open.
fn read_meta_header_from(mut f: File, buf: &mut Vec<u8>) -> io::Result<Result<ObjectMeta>> {
    buf.clear();
    buf.resize(META_HEAD, 0);
    let n = loop {
        match f.read(buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    buf.truncate(n);
    let r = ObjectMeta::from_bytes_without_inline(buf);
    if r.is_err() && ObjectMeta::header_incomplete(buf) {
        f.read_to_end(buf)?;
        return Ok(ObjectMeta::from_bytes_without_inline(buf));
    }
    Ok(r)
}

/// About how many bytes the shard files of `meta`'s data dir take on one drive (the object's
/// size over its data shards; the frames' hashes are not counted).
fn shard_bytes(meta: &ObjectMeta) -> u64 {
    meta.size.div_ceil(u64::from(meta.erasure.data.max(1)))
}

/// Best-effort removal of a tree that is no longer referenced; failures are logged.
fn remove_dir_all_logged(dir: &Path) {
    match fs::remove_dir_all(dir) {
        Err(e) if !is_not_found(&e) => {
            warn!(path = %dir.display(), error = %e, "cannot remove directory")
        }
        _ => {}
    }
}

/// Removes `from` and then each parent up to (not including) `bucket_dir` while they are empty.
fn prune_empty_dirs(bucket_dir: &Path, from: &Path) {
    let mut cur = Some(from);
    while let Some(dir) = cur {
        if dir == bucket_dir || !dir.starts_with(bucket_dir) || fs::remove_dir(dir).is_err() {
            break;
        }
        cur = dir.parent();
    }
}

/// Deletes everything under the tmp directory (start-up sweep of aborted writes).
fn sweep_tmp(tmp: &Path) -> Result<()> {
    for entry in fs::read_dir(tmp)? {
        let entry = entry?;
        let path = entry.path();
        let r = if entry.file_type()?.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        match r {
            Ok(()) => debug!(path = %path.display(), "swept leftover tmp entry"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => warn!(path = %path.display(), error = %e, "cannot sweep tmp entry"),
        }
    }
    Ok(())
}

/// Whether any `quarry.meta` exists under `dir` (symlinks are not followed).
fn tree_has_object(dir: &Path) -> io::Result<bool> {
    let mut subdirs = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        if ft.is_dir() {
            subdirs.push(entry.path());
        } else if entry.file_name() == META_FILE {
            return Ok(true);
        }
    }
    for sub in subdirs {
        if tree_has_object(&sub)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Removes everything under `dir` except objects: meeting a `quarry.meta` (an object created
/// since [`tree_has_object`] looked) is `VolumeNotEmpty`.
fn clear_tree_without_objects(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            clear_tree_without_objects(&path)?;
            match fs::remove_dir(&path) {
                Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                    return Err(DriveError::VolumeNotEmpty)
                }
                Err(e) if !is_not_found(&e) => return Err(e.into()),
                _ => {}
            }
        } else if entry.file_name() == META_FILE {
            return Err(DriveError::VolumeNotEmpty);
        } else {
            match fs::remove_file(&path) {
                Err(e) if !is_not_found(&e) => return Err(e.into()),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Whether the filesystem at `root` is one known to keep a directory's link count at
/// 2 + its number of subdirectories (the test GNU find's fts uses for the same shortcut).
/// Others (btrfs reports 1, NFS may be wrong, overlayfs varies) are read in full.
fn link_count_counts_subdirs(root: &Path) -> bool {
    const EXT2_3_4: u64 = 0xEF53;
    const XFS: u64 = 0x5846_5342;
    const TMPFS: u64 = 0x0102_1994;
    match rustix::fs::statfs(root) {
        Ok(st) => matches!(u64::try_from(st.f_type), Ok(EXT2_3_4 | XFS | TMPFS)),
        Err(e) => {
            debug!(error = %e, "statfs failed; listing reads every directory");
            false
        }
    }
}

/// Creation time (birth time where the filesystem records it, else modification time), in
/// nanoseconds since the Unix epoch.
fn created_ns(md: &fs::Metadata) -> i64 {
    let t = md
        .created()
        .or_else(|_| md.modified())
        .unwrap_or(UNIX_EPOCH);
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}
