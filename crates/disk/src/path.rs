//! Name validation and the mapping from bucket names and object keys to paths on a drive.
//!
//! Every path a drive builds from a client-supplied name goes through this module first: a name
//! that could escape the drive root, collide with a file of the layout, or not be stored as a
//! directory name is refused with [`DriveError::InvalidName`] and a reason.
//!
//! Mapping of a key to a path relative to the bucket directory:
//! - `a/b/c` -> `a/b/c/` (each segment a directory; the object's files live in the last one);
//! - `a/b/` (a "folder marker" key) -> `a/b/.quarry.dir/`.
//!
//! Key segments may not begin with [`RESERVED_PREFIX`] (`.quarry.`), so the folder-marker
//! directory, the drive's system directory and temporary files can never collide with a key.
//! S3 naming rules for buckets (length, characters) are the object layer's job; this module only
//! checks what path safety needs.

use std::path::PathBuf;

use crate::drive::{DriveError, Result};

/// Metadata file of an object, inside the object's directory.
pub const META_FILE: &str = "quarry.meta";
/// The drive's system directory, at the drive root.
pub const SYS_DIR: &str = ".quarry.sys";
/// In-flight writes, under [`SYS_DIR`].
pub const TMP_DIR: &str = "tmp";
/// Multipart uploads, under [`SYS_DIR`].
pub const MULTIPART_DIR: &str = "multipart";
/// The drive's format file, under [`SYS_DIR`].
pub const FORMAT_FILE: &str = "format.json";
/// Directory holding the object of a key that ends in '/', inside the directory of that prefix.
pub const FOLDER_DIR: &str = ".quarry.dir";
/// Names beginning with this are reserved for the layout: no key segment or bucket may use it.
pub const RESERVED_PREFIX: &str = ".quarry.";
/// Prefix of temporary files written next to their final name (then renamed over it).
pub const TMP_FILE_PREFIX: &str = ".quarry.tmp.";
/// Longest object key, in bytes (S3's limit).
pub const MAX_KEY_LEN: usize = 1024;
/// Longest key segment or bucket name, in bytes: the usual filesystem limit on a file name.
pub const MAX_SEGMENT_LEN: usize = 255;

/// Checks that `name` can safely be a bucket directory: non-empty, at most 255 bytes, no '/' or
/// NUL, not `.` or `..`, not beginning with `.quarry`.
pub fn validate_bucket(name: &str) -> Result<()> {
    let bad = |why: &str| Err(DriveError::InvalidName(format!("bucket {name:?}: {why}")));
    if name.is_empty() {
        return bad("empty name");
    }
    if name.len() > MAX_SEGMENT_LEN {
        return bad("longer than 255 bytes");
    }
    if name.contains('/') {
        return bad("contains '/'");
    }
    if name.contains('\0') {
        return bad("contains NUL");
    }
    if name == "." || name == ".." {
        return bad("is a relative path component");
    }
    if name.starts_with(".quarry") {
        return bad("names beginning with \".quarry\" are reserved");
    }
    Ok(())
}

/// Checks that `key` is an object key this drive can store (see the module docs): 1 to 1024
/// bytes, no NUL, no empty segment except one trailing '/', no `.` or `..` segment, no segment
/// equal to `quarry.meta` or beginning with `.quarry.`, no segment longer than 255 bytes.
pub fn validate_key(key: &str) -> Result<()> {
    let bad = |why: String| {
        Err(DriveError::InvalidName(format!(
            "key {:?}: {why}",
            shorten(key)
        )))
    };
    if key.is_empty() {
        return bad("empty key".into());
    }
    if key.len() > MAX_KEY_LEN {
        return bad(format!(
            "{} bytes long, the limit is {MAX_KEY_LEN}",
            key.len()
        ));
    }
    if key.contains('\0') {
        return bad("contains NUL".into());
    }
    let body = key.strip_suffix('/').unwrap_or(key);
    for seg in body.split('/') {
        if let Err(why) = check_segment(seg) {
            return bad(why);
        }
    }
    Ok(())
}

/// Why `seg` cannot be one segment of a key, if it cannot.
fn check_segment(seg: &str) -> std::result::Result<(), String> {
    if seg.is_empty() {
        return Err("empty path segment (leading '/' or '//')".into());
    }
    if seg == "." || seg == ".." {
        return Err(format!("segment {seg:?} is a relative path component"));
    }
    if seg == META_FILE {
        return Err(format!("segment {META_FILE:?} is reserved"));
    }
    if seg.starts_with(RESERVED_PREFIX) {
        return Err(format!(
            "segment {:?} begins with the reserved {RESERVED_PREFIX:?}",
            shorten(seg)
        ));
    }
    if seg.len() > MAX_SEGMENT_LEN {
        return Err(format!(
            "a segment is {} bytes long, the limit is {MAX_SEGMENT_LEN}",
            seg.len()
        ));
    }
    Ok(())
}

/// Whether `seg` is a name a key segment may have (used when reading directories back).
pub(crate) fn is_key_segment(seg: &str) -> bool {
    check_segment(seg).is_ok()
}

/// Validates `key` and returns the object's directory relative to its bucket directory.
pub fn key_rel_path(key: &str) -> Result<PathBuf> {
    validate_key(key)?;
    Ok(match key.strip_suffix('/') {
        Some(dir) => PathBuf::from(dir).join(FOLDER_DIR),
        None => PathBuf::from(key),
    })
}

/// Validates the directory part of a listing prefix (everything up to and including its last
/// '/') and returns it as a path relative to the bucket, or `None` when no key can lie below
/// it (then the listing is empty). `Some("")` when the prefix has no '/'.
pub(crate) fn prefix_dir_rel_path(prefix: &str) -> Option<PathBuf> {
    let dir = match prefix.rfind('/') {
        Some(i) => &prefix[..i],
        None => return Some(PathBuf::new()),
    };
    if dir.len() + 1 > MAX_KEY_LEN || dir.contains('\0') {
        return None;
    }
    if dir.split('/').all(is_key_segment) {
        Some(PathBuf::from(dir))
    } else {
        None
    }
}

/// File name of part `n` inside a data directory.
pub fn part_file_name(n: u32) -> String {
    format!("part.{n}")
}

/// At most 64 bytes of `s` (cut at a char boundary), for error messages.
fn shorten(s: &str) -> &str {
    if s.len() <= 64 {
        return s;
    }
    let mut end = 64;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_table() {
        let seg = "s".repeat(255);
        let long_ok = format!("{seg}/{seg}/{seg}/{}/u", "t".repeat(254));
        assert_eq!(long_ok.len(), 1024);
        let long_bad = format!("{long_ok}x");
        let good: &[&str] = &[
            "a",
            "a/",
            "a/b",
            "a/b/",
            "a-c",
            "photos/2024/cat.jpg",
            "with space",
            "plus+sign",
            "percent%20",
            "ünïcødé/日本語/🦀",
            "...",
            ".hidden",
            "a/.quarry",
            "quarry.meta.txt",
            "x/.quarryish",
            "back\\slash",
            &seg,
            &long_ok,
        ];
        for k in good {
            assert!(validate_key(k).is_ok(), "{k:?} should be valid");
        }
        let too_long_seg = "s".repeat(256);
        let bad: &[&str] = &[
            "",
            "/",
            "/abs",
            "a//b",
            "a//",
            "//",
            "../../etc/passwd",
            "..",
            ".",
            "./a",
            "a/./b",
            "a/../b",
            "a/..",
            "a/.",
            "quarry.meta",
            "a/quarry.meta",
            "a/quarry.meta/",
            ".quarry.sys/x",
            "a/.quarry.dir",
            "a/.quarry.tmp.x/b",
            "nul\0byte",
            &too_long_seg,
            &long_bad,
        ];
        for k in bad {
            match validate_key(k) {
                Err(DriveError::InvalidName(why)) => assert!(!why.is_empty()),
                other => panic!("{k:?} should be refused, got {other:?}"),
            }
        }
    }

    #[test]
    fn bucket_table() {
        for b in ["b", "my-bucket", "a.b", "tmp", "quarry"] {
            assert!(validate_bucket(b).is_ok(), "{b:?}");
        }
        let long = "b".repeat(256);
        for b in [
            "",
            ".",
            "..",
            "a/b",
            "/",
            ".quarry.sys",
            ".quarry",
            "n\0l",
            &long,
        ] {
            assert!(
                matches!(validate_bucket(b), Err(DriveError::InvalidName(_))),
                "{b:?}"
            );
        }
    }

    #[test]
    fn key_paths() {
        assert_eq!(key_rel_path("a").unwrap(), PathBuf::from("a"));
        assert_eq!(key_rel_path("a/b").unwrap(), PathBuf::from("a/b"));
        assert_eq!(key_rel_path("a/").unwrap(), PathBuf::from("a/.quarry.dir"));
        assert_eq!(
            key_rel_path("a/b/").unwrap(),
            PathBuf::from("a/b/.quarry.dir")
        );
        assert!(key_rel_path("../x").is_err());
    }

    #[test]
    fn prefix_dirs() {
        assert_eq!(prefix_dir_rel_path(""), Some(PathBuf::new()));
        assert_eq!(prefix_dir_rel_path("pho"), Some(PathBuf::new()));
        assert_eq!(
            prefix_dir_rel_path("photos/2024/"),
            Some(PathBuf::from("photos/2024"))
        );
        assert_eq!(
            prefix_dir_rel_path("photos/20"),
            Some(PathBuf::from("photos"))
        );
        assert_eq!(prefix_dir_rel_path("../"), None);
        assert_eq!(prefix_dir_rel_path("a//"), None);
        assert_eq!(prefix_dir_rel_path("/"), None);
        assert_eq!(prefix_dir_rel_path("a/.quarry.dir/"), None);
    }

    #[test]
    fn shorten_cuts_at_char_boundary() {
        let s = "é".repeat(40);
        assert!(shorten(&s).len() <= 64);
        assert!(s.starts_with(shorten(&s)));
    }
}
