//! The root credentials: given on the command line (or in the environment), else stored on the
//! drives, else generated once with the OS random source and stored on every drive as
//! `<drive>/.quarry.sys/credentials.json`, mode 0600 from the moment the file exists.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use quarry_disk::path::SYS_DIR;
use rand::rngs::OsRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

const FILE_NAME: &str = "credentials.json";
const FILE_VERSION: u32 = 1;
const ACCESS_KEY_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const SECRET_KEY_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Where the credentials in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Given,
    Stored,
    Generated,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CredentialsFile {
    version: u32,
    access_key: String,
    secret_key: String,
}

/// The root credentials for a node on `drives`, and where they came from.
pub fn resolve(
    given: Option<(String, String)>,
    drives: &[PathBuf],
) -> anyhow::Result<((String, String), Source)> {
    if let Some(given) = given {
        return Ok((given, Source::Given));
    }
    if let Some(stored) = load(drives)? {
        restore_missing(drives, &stored)?;
        return Ok((stored, Source::Stored));
    }
    let generated = (
        random_string(ACCESS_KEY_CHARS, 20),
        random_string(SECRET_KEY_CHARS, 40),
    );
    for drive in drives {
        store(drive, &generated.0, &generated.1)?;
    }
    Ok((generated, Source::Generated))
}

/// Stores the credentials on every formatted drive that has no copy: one replaced (formatted
/// into its slot at start-up, or by the drive check while the server runs) gets the one the
/// others hold, so the keys outlive the replacement of every drive in turn. A drive without
/// `format.json` is left alone (it may be a bare mount point, or about to be formatted).
pub fn restore_missing(
    drives: &[PathBuf],
    (access_key, secret_key): &(String, String),
) -> anyhow::Result<()> {
    for drive in drives {
        let formatted = drive
            .join(SYS_DIR)
            .join(quarry_disk::path::FORMAT_FILE)
            .exists();
        if formatted && !file_path(drive).exists() {
            store(drive, access_key, secret_key)?;
            tracing::info!(drive = %drive.display(), "stored the root credentials on a drive that had none");
        }
    }
    Ok(())
}

fn file_path(drive: &Path) -> PathBuf {
    drive.join(SYS_DIR).join(FILE_NAME)
}

/// The credentials stored on the first drive that has a file. Drives that disagree are reported;
/// a file that exists but cannot be read or parsed is an error (never silently replaced).
fn load(drives: &[PathBuf]) -> anyhow::Result<Option<(String, String)>> {
    let mut found: Option<(PathBuf, CredentialsFile)> = None;
    for drive in drives {
        let path = file_path(drive);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let file: CredentialsFile = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a valid credentials file", path.display()))?;
        if file.version != FILE_VERSION {
            bail!(
                "{}: unknown credentials file version {} (this build reads {FILE_VERSION})",
                path.display(),
                file.version
            );
        }
        match &found {
            None => found = Some((path, file)),
            Some((first, f)) if *f != file => tracing::warn!(
                "{} and {} hold different credentials; using the first",
                first.display(),
                path.display()
            ),
            Some(_) => {}
        }
    }
    Ok(found.map(|(_, f)| (f.access_key, f.secret_key)))
}

/// Writes the credentials file of one drive: a temporary file created with mode 0600, synced,
/// then renamed into place.
fn store(drive: &Path, access_key: &str, secret_key: &str) -> anyhow::Result<()> {
    let dir = drive.join(SYS_DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(FILE_NAME);
    let tmp = dir.join(format!("{FILE_NAME}.tmp-{}", std::process::id()));
    let body = serde_json::to_vec_pretty(&CredentialsFile {
        version: FILE_VERSION,
        access_key: access_key.to_owned(),
        secret_key: secret_key.to_owned(),
    })?;
    let write = || -> std::io::Result<()> {
        // A leftover from a crash is removed, so the file below is always new, with mode 0600.
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp)?;
        file.write_all(&body)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().with_context(|| format!("cannot write {}", path.display()))
}

fn random_string(alphabet: &[u8], len: usize) -> String {
    let mut rng = OsRng;
    (0..len)
        .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drives(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
        let dir = tempfile::tempdir().unwrap();
        let paths = (0..n).map(|i| dir.path().join(format!("d{i}"))).collect();
        (dir, paths)
    }

    #[test]
    fn generated_once_then_loaded() {
        let (_dir, paths) = drives(3);
        let ((ak, sk), source) = resolve(None, &paths).unwrap();
        assert_eq!(source, Source::Generated);
        assert_eq!(ak.len(), 20);
        assert!(ak
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()));
        assert_eq!(sk.len(), 40);
        for p in &paths {
            let meta = std::fs::metadata(file_path(p)).unwrap();
            #[cfg(unix)]
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
                0o600
            );
        }
        let (again, source) = resolve(None, &paths).unwrap();
        assert_eq!(source, Source::Stored);
        assert_eq!(again, (ak.clone(), sk.clone()));
        // A replaced drive gets the others' copy back once it is formatted (not before: it
        // may be a bare mount point); then the first copies can go too.
        std::fs::remove_dir_all(&paths[2]).unwrap();
        std::fs::create_dir_all(&paths[2]).unwrap();
        let keys = ((ak.clone(), sk.clone()), Source::Stored);
        assert_eq!(resolve(None, &paths).unwrap(), keys);
        assert!(!file_path(&paths[2]).exists());
        std::fs::create_dir_all(paths[2].join(SYS_DIR)).unwrap();
        std::fs::write(
            paths[2].join(SYS_DIR).join(quarry_disk::path::FORMAT_FILE),
            b"{}",
        )
        .unwrap();
        assert_eq!(resolve(None, &paths).unwrap(), keys);
        std::fs::remove_file(file_path(&paths[0])).unwrap();
        std::fs::remove_file(file_path(&paths[1])).unwrap();
        assert_eq!(
            resolve(None, &paths[2..]).unwrap(),
            ((ak, sk), Source::Stored)
        );
    }

    #[test]
    fn given_credentials_win_and_are_not_stored() {
        let (_dir, paths) = drives(1);
        let given = ("admin".to_owned(), "secret-123".to_owned());
        let (got, source) = resolve(Some(given.clone()), &paths).unwrap();
        assert_eq!((got, source), (given, Source::Given));
        assert!(!file_path(&paths[0]).exists());
    }

    #[test]
    fn a_corrupt_file_is_an_error() {
        let (_dir, paths) = drives(1);
        std::fs::create_dir_all(paths[0].join(SYS_DIR)).unwrap();
        std::fs::write(file_path(&paths[0]), "{not json").unwrap();
        let err = resolve(None, &paths).unwrap_err();
        assert!(
            format!("{err:#}").contains("not a valid credentials file"),
            "{err:#}"
        );
    }

    #[test]
    fn random_strings_differ() {
        assert_ne!(
            random_string(SECRET_KEY_CHARS, 40),
            random_string(SECRET_KEY_CHARS, 40)
        );
    }
}
