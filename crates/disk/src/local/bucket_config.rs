//! Per-bucket configuration blobs: small named files (CORS, policy, lifecycle, ...) stored under
//! `<drive>/.quarry.sys/buckets/<bucket>/<name>`, outside the bucket's key space so no object key
//! can collide with them. The drive stores opaque bytes; their format (and its version) belongs
//! to the object layer.
//!
//! A blob can only be written while its bucket exists. The blobs of a bucket are removed with the
//! bucket, and a stale directory left by a crash is removed when a bucket of that name is created.

use std::fs;
use std::path::PathBuf;

use super::{check_bucket, fsync_dir, is_not_found, write_atomic, LocalDrive};
use crate::drive::{DriveError, Result};
use crate::path::{validate_bucket, SYS_DIR};

/// Directory of the bucket configuration blobs, under [`SYS_DIR`].
pub const BUCKETS_DIR: &str = "buckets";

/// The largest configuration blob a drive accepts (S3's largest documents, e.g. a bucket policy,
/// are 20 KiB; lifecycle and CORS configurations stay well under this).
pub const MAX_BUCKET_CONFIG: usize = 1024 * 1024;

/// The configuration namespace of the deployment itself (IAM state and the like), beside the
/// buckets': `.quarry.sys/buckets/_system/`. No S3 bucket can have this name (S3 names have no
/// `_`), and it needs no bucket directory.
pub const SYSTEM_CONFIG: &str = "_system";

/// Checks a blob name: 1 to 64 bytes of `[a-z0-9._-]`, not beginning with '.'.
pub fn validate_config_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(DriveError::InvalidName(format!(
            "bucket configuration name {name:?}: 1 to 64 characters of a-z, 0-9, '.', '_', '-', not beginning with '.'"
        )))
    }
}

impl LocalDrive {
    /// `.quarry.sys/buckets/<bucket>`, validated.
    pub(super) fn bucket_config_dir(&self, bucket: &str) -> Result<PathBuf> {
        validate_bucket(bucket)?;
        Ok(self.root.join(SYS_DIR).join(BUCKETS_DIR).join(bucket))
    }

    /// The bucket a blob belongs to must exist; the system namespace always does.
    fn check_config_owner(&self, bucket: &str) -> Result<()> {
        if bucket == SYSTEM_CONFIG {
            return Ok(());
        }
        check_bucket(&self.bucket_dir(bucket)?)
    }

    pub(super) fn read_bucket_config_sync(&self, bucket: &str, name: &str) -> Result<Vec<u8>> {
        validate_config_name(name)?;
        let dir = self.bucket_config_dir(bucket)?;
        self.check_config_owner(bucket)?;
        match fs::read(dir.join(name)) {
            Ok(b) => Ok(b),
            Err(e) if is_not_found(&e) => Err(DriveError::FileNotFound),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn write_bucket_config_sync(
        &self,
        bucket: &str,
        name: &str,
        bytes: &[u8],
    ) -> Result<()> {
        validate_config_name(name)?;
        if bytes.len() > MAX_BUCKET_CONFIG {
            return Err(DriveError::CorruptMeta(format!(
                "bucket configuration {name:?} is {} bytes; at most {MAX_BUCKET_CONFIG} are stored",
                bytes.len()
            )));
        }
        let dir = self.bucket_config_dir(bucket)?;
        self.check_config_owner(bucket)?;
        let buckets = self.root.join(SYS_DIR).join(BUCKETS_DIR);
        for d in [&buckets, &dir] {
            match fs::create_dir(d) {
                Ok(()) => {
                    if let Some(parent) = d.parent() {
                        fsync_dir(parent)?;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e.into()),
            }
        }
        write_atomic(&dir, name, bytes)?;
        Ok(())
    }

    /// Removing a blob that does not exist is not an error.
    pub(super) fn delete_bucket_config_sync(&self, bucket: &str, name: &str) -> Result<()> {
        validate_config_name(name)?;
        let dir = self.bucket_config_dir(bucket)?;
        self.check_config_owner(bucket)?;
        match fs::remove_file(dir.join(name)) {
            Ok(()) => Ok(fsync_dir(&dir)?),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The names of the blobs of `bucket`, sorted. Files that are not valid names (a write's
    /// temporary file) are left out.
    pub(super) fn list_bucket_configs_sync(&self, bucket: &str) -> Result<Vec<String>> {
        let dir = self.bucket_config_dir(bucket)?;
        self.check_config_owner(bucket)?;
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if is_not_found(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if validate_config_name(&name).is_ok() && entry.file_type()?.is_file() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Removes every blob of `bucket` (the bucket is being deleted or created anew).
    pub(super) fn clear_bucket_configs(&self, bucket: &str) -> Result<()> {
        let dir = self.bucket_config_dir(bucket)?;
        match fs::remove_dir_all(&dir) {
            Ok(()) => {
                if let Some(parent) = dir.parent() {
                    fsync_dir(parent)?;
                }
                Ok(())
            }
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
