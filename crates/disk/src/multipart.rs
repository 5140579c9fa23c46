//! Multipart uploads on a drive: the versioned `upload.meta` and `part.N.meta` files, the upload id
//! format, and the directory an upload lives in.
//!
//! Layout of one upload (see DESIGN.md):
//! ```text
//! <drive>/.quarry.sys/multipart/<hash>/<upload-id>/upload.meta        UploadMeta (JSON)
//! <drive>/.quarry.sys/multipart/<hash>/<upload-id>/part.N.meta        PartMeta (JSON)
//! <drive>/.quarry.sys/multipart/<hash>/<upload-id>/<part-data-dir>/part.N   the part's shard file
//! ```
//! `<hash>` is the hex blake3 of `bucket/key` (a bucket name has no '/', so the string names one
//! object), which keeps every upload of one key in one directory. Each part lives in a data dir of
//! its own, named in its `part.N.meta`: uploading part N again writes a new data dir and then
//! replaces `part.N.meta` atomically, so a reader sees either the old part or the new one.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::drive::DriveError;
use crate::meta::ErasureInfo;

/// The version of `upload.meta` and `part.N.meta` this build writes and reads.
pub const UPLOAD_META_VERSION: u32 = 1;

/// File name of an upload's metadata, inside the upload directory.
pub const UPLOAD_META_FILE: &str = "upload.meta";

/// Highest part number S3 allows.
pub const MAX_PART_NUMBER: u32 = 10_000;

/// One multipart upload as one drive stores it. Identical on every drive except `erasure.index`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadMeta {
    /// Always [`UPLOAD_META_VERSION`] when written by this build.
    pub version: u32,
    pub bucket: String,
    pub key: String,
    pub upload_id: String,
    /// When the upload was created, nanoseconds since the Unix epoch.
    pub initiated_ns: i64,
    /// Standard headers the object will carry (lower-case names), as for a PUT.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// User metadata, lower-case names without the `x-amz-meta-` prefix.
    #[serde(default)]
    pub user_meta: BTreeMap<String, String>,
    /// The additional checksum asked for at creation (`x-amz-checksum-algorithm`), lower-case
    /// (e.g. "crc32"); every part stores its checksum of that algorithm.
    #[serde(default)]
    pub checksum_algorithm: Option<String>,
    /// How every part is coded; `index` is this drive's shard.
    pub erasure: ErasureInfo,
}

/// One uploaded part as one drive stores it (`part.N.meta`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartMeta {
    /// Always [`UPLOAD_META_VERSION`] when written by this build.
    pub version: u32,
    /// The part number the client gave, 1..=10000.
    pub number: u32,
    /// Bytes of object data in the part.
    pub size: u64,
    /// Hex MD5 of the part's bytes, without quotes.
    pub etag: String,
    /// Base64 checksum of the part in the upload's checksum algorithm, if it has one.
    #[serde(default)]
    pub checksum: Option<String>,
    /// When the part was uploaded, nanoseconds since the Unix epoch.
    pub mod_time_ns: i64,
    /// The directory (inside the upload directory) holding this part's shard file `part.N`.
    pub data_dir: Uuid,
}

/// The directory name that holds every upload of `bucket/key`: hex blake3 of `bucket/key`.
pub fn upload_hash(bucket: &str, key: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(bucket.as_bytes());
    h.update(b"/");
    h.update(key.as_bytes());
    h.finalize().to_hex().to_string()
}

/// A fresh, unguessable upload id: a random (v4) UUID in its hyphenated lower-case form.
pub fn new_upload_id() -> String {
    Uuid::new_v4().to_string()
}

/// Checks that `id` is an upload id this build hands out (hyphenated lower-case UUID) before it
/// becomes part of a path; anything else is `InvalidName`.
pub fn validate_upload_id(id: &str) -> Result<(), DriveError> {
    match Uuid::try_parse(id) {
        Ok(u) if u.hyphenated().to_string() == id => Ok(()),
        _ => Err(DriveError::InvalidName(format!(
            "upload id {:?} is not one this server issued",
            id.chars().take(64).collect::<String>()
        ))),
    }
}

/// File name of part `n`'s metadata inside an upload directory.
pub fn part_meta_file_name(n: u32) -> String {
    format!("part.{n}.meta")
}

/// The part number of a `part.N.meta` file name, if it is one.
pub fn parse_part_meta_file_name(name: &str) -> Option<u32> {
    let n = name.strip_prefix("part.")?.strip_suffix(".meta")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.starts_with('0') {
        return None;
    }
    n.parse().ok().filter(|n| (1..=MAX_PART_NUMBER).contains(n))
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // Strings, integers, maps with string keys and uuids: serializing cannot fail.
    serde_json::to_vec(v).expect("multipart metadata serializes to JSON")
}

/// Decodes a versioned JSON document: the version alone first, so an unknown version is
/// `UnsupportedVersion` whatever the rest looks like.
fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, DriveError> {
    #[derive(Deserialize)]
    struct Probe {
        version: u32,
    }
    let probe: Probe =
        serde_json::from_slice(b).map_err(|e| DriveError::CorruptMeta(e.to_string()))?;
    if probe.version != UPLOAD_META_VERSION {
        return Err(DriveError::UnsupportedVersion {
            found: probe.version,
            supported: UPLOAD_META_VERSION,
        });
    }
    serde_json::from_slice(b).map_err(|e| DriveError::CorruptMeta(e.to_string()))
}

impl UploadMeta {
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bytes(b: &[u8]) -> Result<UploadMeta, DriveError> {
        decode(b)
    }
}

impl PartMeta {
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bytes(b: &[u8]) -> Result<PartMeta, DriveError> {
        decode(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_ids_are_validated() {
        let id = new_upload_id();
        assert!(validate_upload_id(&id).is_ok());
        assert_ne!(id, new_upload_id());
        for bad in [
            "",
            "..",
            "../x",
            "a/b",
            &id.to_uppercase(),
            &id.replace('-', ""),
            &format!("{id}/.."),
            "00000000-0000-0000-0000-00000000000g",
        ] {
            assert!(
                matches!(validate_upload_id(bad), Err(DriveError::InvalidName(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn part_meta_names() {
        assert_eq!(parse_part_meta_file_name(&part_meta_file_name(7)), Some(7));
        assert_eq!(parse_part_meta_file_name("part.10000.meta"), Some(10000));
        for bad in [
            "part.0.meta",
            "part.10001.meta",
            "part.01.meta",
            "part..meta",
            "part.1",
            "upload.meta",
            "part.-1.meta",
        ] {
            assert_eq!(parse_part_meta_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_round_trip_and_refuse_unknown_versions() {
        let p = PartMeta {
            version: UPLOAD_META_VERSION,
            number: 3,
            size: 5 << 20,
            etag: "9e107d9d372bb6826bd81d3542a419d6".into(),
            checksum: Some("AAAAAA==".into()),
            mod_time_ns: 1,
            data_dir: Uuid::new_v4(),
        };
        assert_eq!(PartMeta::from_bytes(&p.to_bytes()).unwrap(), p);
        let mut v: serde_json::Value = serde_json::from_slice(&p.to_bytes()).unwrap();
        v["version"] = 9.into();
        v["size"] = "not a number".into();
        assert!(matches!(
            PartMeta::from_bytes(&serde_json::to_vec(&v).unwrap()),
            Err(DriveError::UnsupportedVersion {
                found: 9,
                supported: 1
            })
        ));
        assert!(matches!(
            UploadMeta::from_bytes(b"{\"version\":1}"),
            Err(DriveError::CorruptMeta(_))
        ));
        assert!(matches!(
            UploadMeta::from_bytes(b"garbage"),
            Err(DriveError::CorruptMeta(_))
        ));
    }

    #[test]
    fn hash_names_one_object() {
        assert_ne!(upload_hash("a", "b/c"), upload_hash("a", "b/d"));
        assert_eq!(upload_hash("a", "b").len(), 64);
    }
}
