//! S3 naming rules for buckets and keys, checked before anything reaches a drive.

use quarry_disk::DriveError;

use crate::error::{Error, Result};

/// Longest key S3 accepts, in bytes of UTF-8.
pub const MAX_KEY_LEN: usize = 1024;

/// Checks a bucket name against S3's rules for general purpose buckets: 3–63 characters of
/// lower-case letters, digits, '.' and '-', beginning and ending with a letter or digit, no two
/// adjacent periods, not formatted as an IPv4 address, and not using a reserved prefix or suffix.
pub fn check_bucket_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::InvalidBucketName(format!("{name:?}: {why}")));
    if name.len() < 3 || name.len() > 63 {
        return bad("bucket names must be between 3 and 63 characters long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return bad(
            "bucket names can consist only of lowercase letters, numbers, periods and hyphens",
        );
    }
    let first = name.as_bytes()[0];
    let last = name.as_bytes()[name.len() - 1];
    if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
        return bad("bucket names must begin and end with a letter or number");
    }
    if name.contains("..") || name.contains(".-") || name.contains("-.") {
        return bad(
            "bucket names must not contain two adjacent periods or a period next to a hyphen",
        );
    }
    if name.parse::<std::net::Ipv4Addr>().is_ok() {
        return bad("bucket names must not be formatted as an IP address");
    }
    if name.starts_with("xn--") || name.starts_with("sthree-") {
        return bad("bucket names must not start with a reserved prefix");
    }
    if name.ends_with("-s3alias") || name.ends_with("--ol-s3") {
        return bad("bucket names must not end with a reserved suffix");
    }
    Ok(())
}

/// Checks an object key: at most 1024 bytes, and a name a drive can store safely (no empty,
/// "." or ".." segment, nothing under the system directory).
pub fn check_key(key: &str) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLong);
    }
    match quarry_disk::path::validate_key(key) {
        Ok(()) => Ok(()),
        Err(DriveError::InvalidName(why)) => Err(Error::InvalidKey(why)),
        Err(e) => Err(Error::InvalidKey(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names() {
        for good in ["abc", "my-bucket", "my.bucket.2", "a1b", &"a".repeat(63)] {
            assert!(check_bucket_name(good).is_ok(), "{good}");
        }
        for bad in [
            "ab",
            "UPPER",
            "a_b",
            "192.168.1.1",
            "-abc",
            "abc-",
            "a..b",
            "a.-b",
            "xn--abc",
            "abc-s3alias",
            &"a".repeat(64),
            "",
            "a/b",
        ] {
            assert!(
                matches!(check_bucket_name(bad), Err(Error::InvalidBucketName(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn key_length() {
        // 1024 bytes in segments a filesystem can hold (each at most 255 bytes).
        let long = vec!["k".repeat(255); 5].join("/");
        let long = &long[..1024];
        assert!(check_key(long).is_ok());
        assert!(matches!(
            check_key(&"k".repeat(1025)),
            Err(Error::KeyTooLong)
        ));
        assert!(matches!(check_key("a//b"), Err(Error::InvalidKey(_))));
        assert!(matches!(
            check_key("../../etc/passwd"),
            Err(Error::InvalidKey(_))
        ));
    }
}
