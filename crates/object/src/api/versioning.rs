//! Types of S3 versioning: a bucket's versioning state, version ids, and the ListObjectVersions
//! request and page.

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

use super::ObjectInfo;
use crate::error::Error;

/// A bucket's versioning state. A bucket starts `Unversioned`; once versioning has been enabled
/// it is `Enabled` or `Suspended` and never `Unversioned` again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum VersioningState {
    #[default]
    Unversioned,
    Enabled,
    Suspended,
}

impl VersioningState {
    /// Whether versioning was ever configured (the `null` version then shows its id).
    pub fn configured(self) -> bool {
        self != VersioningState::Unversioned
    }

    /// The stored form (the payload of the bucket's `versioning` configuration blob).
    pub fn as_str(self) -> &'static str {
        match self {
            VersioningState::Unversioned => "",
            VersioningState::Enabled => "Enabled",
            VersioningState::Suspended => "Suspended",
        }
    }

    /// Parses the stored form; an unknown value is corrupt configuration.
    pub fn from_stored(b: &[u8]) -> Result<VersioningState, Error> {
        match b {
            b"Enabled" => Ok(VersioningState::Enabled),
            b"Suspended" => Ok(VersioningState::Suspended),
            _ => Err(Error::Corrupt(format!(
                "bucket versioning configuration {:?} is neither Enabled nor Suspended",
                String::from_utf8_lossy(b)
            ))),
        }
    }
}

/// The id of one version of an object: `null` (written while the bucket was unversioned or
/// suspended) or a UUID (written while versioning was enabled). Shown to clients as `null` or
/// the UUID's hyphenated form.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum VersionId {
    #[default]
    Null,
    Id(Uuid),
}

impl VersionId {
    /// As stored on the drives: `None` is the null version.
    pub fn from_stored(id: Option<Uuid>) -> VersionId {
        id.map_or(VersionId::Null, VersionId::Id)
    }

    pub fn stored(self) -> Option<Uuid> {
        match self {
            VersionId::Null => None,
            VersionId::Id(u) => Some(u),
        }
    }
}

impl fmt::Display for VersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VersionId::Null => f.write_str("null"),
            VersionId::Id(u) => u.hyphenated().fmt(f),
        }
    }
}

impl FromStr for VersionId {
    type Err = Error;

    /// `null`, or a version id this store issued; anything else is `InvalidVersionId`.
    fn from_str(s: &str) -> Result<VersionId, Error> {
        if s == "null" {
            return Ok(VersionId::Null);
        }
        // Only the hyphenated lower-case form this store hands out names a version.
        match Uuid::try_parse(s) {
            Ok(u) if u.hyphenated().to_string() == s => Ok(VersionId::Id(u)),
            _ => Err(Error::InvalidVersionId(s.chars().take(64).collect())),
        }
    }
}

/// What a DELETE did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeleteResult {
    /// The version the request created (a delete marker) or removed; `None` in an unversioned
    /// bucket's plain delete (no version id is shown).
    pub version_id: Option<VersionId>,
    /// A delete marker was created, or the version removed was one.
    pub delete_marker: bool,
}

/// A ListObjectVersions request, one page.
#[derive(Debug, Clone, Default)]
pub struct ListVersionsOptions {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// Versions of keys after this key, and (with `version_id_marker`) the versions of this key
    /// after that version.
    pub key_marker: Option<String>,
    pub version_id_marker: Option<VersionId>,
    /// 1..=1000 (the front end clamps); 0 returns an empty, non-truncated page.
    pub max_keys: usize,
}

/// One page of ListObjectVersions: versions (and delete markers) in key order, newest first
/// within a key.
#[derive(Debug, Clone, Default)]
pub struct ListVersionsResult {
    /// `version_id`, `is_latest` and `delete_marker` are set on each.
    pub versions: Vec<ObjectInfo>,
    pub common_prefixes: Vec<String>,
    pub is_truncated: bool,
    pub next_key_marker: Option<String>,
    pub next_version_id_marker: Option<VersionId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ids_parse_and_print() {
        let u = Uuid::new_v4();
        assert_eq!("null".parse::<VersionId>().unwrap(), VersionId::Null);
        assert_eq!(
            u.to_string().parse::<VersionId>().unwrap(),
            VersionId::Id(u)
        );
        assert_eq!(VersionId::Id(u).to_string(), u.to_string());
        assert_eq!(VersionId::Null.to_string(), "null");
        for bad in [
            "",
            "NULL",
            "abc",
            &u.simple().to_string(),
            &u.to_string().to_uppercase(),
            &format!("{{{u}}}"),
        ] {
            assert!(
                matches!(bad.parse::<VersionId>(), Err(Error::InvalidVersionId(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn versioning_state_stored_form() {
        for s in [VersioningState::Enabled, VersioningState::Suspended] {
            assert_eq!(
                VersioningState::from_stored(s.as_str().as_bytes()).unwrap(),
                s
            );
        }
        assert!(VersioningState::from_stored(b"enabled").is_err());
    }
}
