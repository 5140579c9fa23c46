//! Multipart uploads on a local drive: the synchronous halves of the `Drive` methods (see
//! [`crate::multipart`] for the layout). Every name is validated before a path is built.

use std::fs;
use std::io;
use std::path::PathBuf;

use tracing::{debug, warn};
use uuid::Uuid;

use super::{
    check_bucket, fsync_dir, fsync_dir_or_ancestor, is_not_found, remove_dir_all_logged,
    write_atomic, LocalDrive,
};
use crate::drive::{DriveError, Result};
use crate::multipart::{
    parse_part_meta_file_name, part_meta_file_name, upload_hash, validate_upload_id, PartMeta,
    UploadMeta, UPLOAD_META_FILE,
};
use crate::path::{part_file_name, validate_bucket, validate_key, MULTIPART_DIR, SYS_DIR};

impl LocalDrive {
    /// A clone of the drive and owned copies of an upload's names, to move to the blocking pool.
    pub(super) fn upload_names(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> (LocalDrive, String, String, String) {
        (
            self.clone(),
            bucket.to_owned(),
            key.to_owned(),
            upload_id.to_owned(),
        )
    }

    fn multipart_dir(&self) -> PathBuf {
        self.root.join(SYS_DIR).join(MULTIPART_DIR)
    }

    /// Validated path of the directory of every upload of `bucket/key`.
    fn uploads_dir(&self, bucket: &str, key: &str) -> Result<PathBuf> {
        validate_bucket(bucket)?;
        validate_key(key)?;
        Ok(self.multipart_dir().join(upload_hash(bucket, key)))
    }

    /// Validated path of one upload's directory (which may not exist).
    fn upload_dir(&self, bucket: &str, key: &str, upload_id: &str) -> Result<PathBuf> {
        validate_upload_id(upload_id)?;
        Ok(self.uploads_dir(bucket, key)?.join(upload_id))
    }

    /// The upload directory, after checking its `upload.meta` is there.
    fn existing_upload_dir(&self, bucket: &str, key: &str, upload_id: &str) -> Result<PathBuf> {
        let dir = self.upload_dir(bucket, key, upload_id)?;
        match fs::symlink_metadata(dir.join(UPLOAD_META_FILE)) {
            Ok(md) if md.is_file() => Ok(dir),
            Ok(_) => Err(DriveError::FileNotFound),
            Err(e) if is_not_found(&e) => Err(DriveError::FileNotFound),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn create_upload_sync(&self, meta: &UploadMeta) -> Result<()> {
        let dir = self.upload_dir(&meta.bucket, &meta.key, &meta.upload_id)?;
        check_bucket(&self.bucket_dir(&meta.bucket)?)?;
        let parent = self.uploads_dir(&meta.bucket, &meta.key)?;
        let mp = self.multipart_dir();
        let make_dirs = || -> io::Result<()> {
            for (d, up) in [(&mp, self.root.join(SYS_DIR)), (&parent, mp.clone())] {
                match fs::create_dir(d) {
                    Ok(()) => fsync_dir(&up)?,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            match fs::create_dir(&dir) {
                Ok(()) => fsync_dir(&parent),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e),
            }
        };
        // The removal of the key's last other upload takes the key's uploads directory with it
        // when it finds it empty: between its creation (or finding it) here and this upload's
        // directory in it. Then the directories are made again.
        let mut attempt = 0;
        loop {
            match make_dirs() {
                Ok(()) => break,
                Err(e) if is_not_found(&e) && attempt < 3 => {
                    debug!(error = %e, attempt, "uploads directory vanished; retrying");
                    attempt += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
        write_atomic(&dir, UPLOAD_META_FILE, &meta.to_bytes())?;
        Ok(())
    }

    pub(super) fn read_upload_sync(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<UploadMeta> {
        let dir = self.upload_dir(bucket, key, upload_id)?;
        match fs::read(dir.join(UPLOAD_META_FILE)) {
            Ok(b) => UploadMeta::from_bytes(&b),
            Err(e) if is_not_found(&e) => Err(DriveError::FileNotFound),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn commit_part_sync(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part: &PartMeta,
    ) -> Result<()> {
        let dir = self.existing_upload_dir(bucket, key, upload_id)?;
        let tmp_root = self.tmp_write_dir(tmp_id);
        let src = tmp_root.join(part.data_dir.to_string());
        match fsync_dir(&src) {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {
                warn!(%tmp_id, data_dir = %part.data_dir, "part data to commit is missing from tmp");
                return Err(DriveError::FileNotFound);
            }
            Err(e) => return Err(e.into()),
        }
        let meta_name = part_meta_file_name(part.number);
        let old = match fs::read(dir.join(&meta_name)) {
            Ok(b) => PartMeta::from_bytes(&b).ok().map(|p| p.data_dir),
            Err(_) => None,
        };
        let dst = dir.join(part.data_dir.to_string());
        fs::rename(&src, &dst).map_err(|e| {
            if is_not_found(&e) {
                // The upload was removed (aborted or completed) since it was checked.
                DriveError::FileNotFound
            } else {
                e.into()
            }
        })?;
        // The data dir and the part metadata are entries of one directory: write_atomic's fsync
        // of that directory covers the rename above too.
        if let Err(e) = write_atomic(&dir, &meta_name, &part.to_bytes()) {
            remove_dir_all_logged(&dst);
            return Err(if is_not_found(&e) {
                DriveError::FileNotFound
            } else {
                e.into()
            });
        }
        if let Some(old) = old.filter(|d| *d != part.data_dir) {
            remove_dir_all_logged(&dir.join(old.to_string()));
        }
        remove_dir_all_logged(&tmp_root);
        Ok(())
    }

    pub(super) fn list_parts_sync(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<PartMeta>> {
        let dir = self.existing_upload_dir(bucket, key, upload_id)?;
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if is_not_found(&e) => return Err(DriveError::FileNotFound),
            Err(e) => return Err(e.into()),
        };
        let mut parts = Vec::new();
        for entry in rd {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Some(n) = parse_part_meta_file_name(&name) else {
                continue;
            };
            let path = entry.path();
            let b = match fs::read(&path) {
                Ok(b) => b,
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            match PartMeta::from_bytes(&b) {
                Ok(p) if p.number == n => parts.push(p),
                Ok(p) => {
                    warn!(path = %path.display(), number = p.number, "part metadata names another part; ignored")
                }
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "unreadable part metadata; ignored")
                }
            }
        }
        parts.sort_by_key(|p| p.number);
        Ok(parts)
    }

    /// Reads exactly `len` bytes at `offset` of the shard file of part `part` (in its data dir
    /// `data_dir`) of an upload: what a heal rebuilds another drive's copy of the part from.
    pub(super) fn read_part_shard_sync(
        &self,
        upload: (&str, &str, &str),
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let (bucket, key, upload_id) = upload;
        let dir = self.existing_upload_dir(bucket, key, upload_id)?;
        let path = dir.join(data_dir.to_string()).join(part_file_name(part));
        let file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if is_not_found(&e) => return Err(DriveError::FileNotFound),
            Err(e) => return Err(e.into()),
        };
        let file_len = file.metadata()?.len();
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > file_len)
        {
            return Err(DriveError::Truncated {
                offset,
                wanted: len,
                len: file_len,
            });
        }
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    pub(super) fn stage_parts_sync(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[PartMeta],
        tmp_id: Uuid,
        data_dir: Uuid,
    ) -> Result<()> {
        let dir = self.existing_upload_dir(bucket, key, upload_id)?;
        let write_dir = self.tmp_write_dir(tmp_id);
        let target = write_dir.join(data_dir.to_string());
        for d in [&write_dir, &target] {
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
        for (i, p) in parts.iter().enumerate() {
            let src = dir
                .join(p.data_dir.to_string())
                .join(part_file_name(p.number));
            let dst = target.join(part_file_name(i as u32 + 1));
            match fs::hard_link(&src, &dst) {
                Ok(()) => {}
                Err(e) if is_not_found(&e) => return Err(DriveError::FileNotFound),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    fs::remove_file(&dst)?;
                    fs::hard_link(&src, &dst)?;
                }
                Err(e) => {
                    // A filesystem without hard links: copy (and sync) instead.
                    debug!(error = %e, "hard link failed; copying the part");
                    fs::copy(&src, &dst).map_err(|e| {
                        if is_not_found(&e) {
                            DriveError::FileNotFound
                        } else {
                            e.into()
                        }
                    })?;
                    fs::File::open(&dst)?.sync_all()?;
                }
            }
        }
        fsync_dir(&target)?;
        Ok(())
    }

    pub(super) fn delete_upload_sync(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<()> {
        let dir = self.upload_dir(bucket, key, upload_id)?;
        let parent = self.uploads_dir(bucket, key)?;
        // Out of sight first, in one rename: a crash while the tree is removed leaves it in tmp,
        // where the start-up sweep finishes the job.
        let trash = self.tmp_write_dir(Uuid::new_v4());
        match fs::rename(&dir, &trash) {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => return Err(DriveError::FileNotFound),
            Err(e) => return Err(e.into()),
        }
        // Another removal may find the key's directory empty once this rename has left it, and
        // take it away.
        fsync_dir_or_ancestor(&parent, &self.multipart_dir())?;
        remove_dir_all_logged(&trash);
        // The last upload of the key takes the key's directory with it (fails if not empty).
        let _ = fs::remove_dir(&parent);
        Ok(())
    }

    pub(super) fn list_uploads_sync(&self, bucket: Option<&str>) -> Result<Vec<UploadMeta>> {
        if let Some(b) = bucket {
            validate_bucket(b)?;
        }
        let mut out = Vec::new();
        let rd = match fs::read_dir(self.multipart_dir()) {
            Ok(rd) => rd,
            Err(e) if is_not_found(&e) => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for hash_dir in rd {
            let hash_dir = hash_dir?;
            let uploads = match fs::read_dir(hash_dir.path()) {
                Ok(rd) => rd,
                Err(e) if is_not_found(&e) || e.kind() == io::ErrorKind::NotADirectory => continue,
                Err(e) => return Err(e.into()),
            };
            for up in uploads {
                let up = up?;
                let path = up.path().join(UPLOAD_META_FILE);
                let b = match fs::read(&path) {
                    Ok(b) => b,
                    Err(e) if is_not_found(&e) => continue,
                    Err(e) => return Err(e.into()),
                };
                match UploadMeta::from_bytes(&b) {
                    Ok(m) if bucket.is_none_or(|b| b == m.bucket) => out.push(m),
                    Ok(_) => {}
                    Err(e) => {
                        warn!(path = %path.display(), error = %e, "unreadable upload metadata; skipped")
                    }
                }
            }
        }
        Ok(out)
    }
}
