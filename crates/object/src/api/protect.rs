//! Per-version metadata that S3 changes in place, without writing a new version: an object's
//! tags (and, with object lock, its retention and legal hold). They are stored as reserved
//! entries of the version's stored headers (`x-quarry-*` names, which the front end never sends
//! back as headers), so they travel, heal and read with the version's metadata and need no
//! change of the metadata format.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::ObjectInfo;
use crate::error::Result;

/// The version's tag set, URL-encoded as the `x-amz-tagging` header carries it
/// (`k1=v1&k2=v2`, keys in ascending order). Absent: no tags.
pub const TAGS_HEADER: &str = "x-quarry-tagging";

/// The version's access control list, in the front end's stored form (`quarry_s3::acl`).
/// Absent: the owner's full control only (`private`). Never copied with the version: a copy
/// gets the ACL its request names ([`super::CopyOptions::acl`]).
pub const ACL_HEADER: &str = "x-quarry-acl";

/// Gives stored headers the ACL entry `acl` (`None`: none, i.e. private).
pub fn set_acl_entry(headers: &mut BTreeMap<String, String>, acl: Option<&str>) {
    match acl {
        Some(a) => {
            headers.insert(ACL_HEADER.to_owned(), a.to_owned());
        }
        None => {
            headers.remove(ACL_HEADER);
        }
    }
}

/// Prefix of the stored header entries that record a version's (or an upload's) encryption:
/// the front end's record (`Encryption::record`, each name prefixed) and the package format.
/// Reserved like every `x-quarry-` name.
pub const SSE_RECORD_PREFIX: &str = "x-quarry-internal-sse-";

/// When the version's metadata was last changed in place (nanoseconds since the Unix epoch,
/// decimal). Two copies of one version that differ in it are different copies for quorum: the
/// change is made on a write quorum, so the copies that missed it never win a read. The drives
/// name it too: a walk keeps it in its listing view.
pub const META_UPDATED_HEADER: &str = quarry_disk::META_UPDATED_HEADER;

/// Stored header names reserved for the store itself (never sent as response headers, never
/// accepted from a client as stored headers).
pub fn is_internal_header(name: &str) -> bool {
    name.starts_with("x-quarry-")
}

/// An in-place change of a version's stored headers: sees the version as it is (under the
/// object's lock, so nothing changes it meanwhile) and edits its headers, or refuses with the
/// error the request gets.
pub type HeadersUpdate =
    Arc<dyn Fn(&ObjectInfo, &mut BTreeMap<String, String>) -> Result<()> + Send + Sync>;

/// An in-place change of an upload's stored headers (see
/// [`super::ObjectLayer::update_upload_headers`]): edits them, or refuses (nothing is written).
pub type UploadHeadersUpdate =
    Arc<dyn Fn(&mut BTreeMap<String, String>) -> Result<()> + Send + Sync>;

/// The stored update stamp of a version's (or an upload's) metadata (0: never changed in place).
pub fn meta_updated_ns(headers: &BTreeMap<String, String>) -> i64 {
    headers
        .get(META_UPDATED_HEADER)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The version's retention mode (`GOVERNANCE` or `COMPLIANCE`); with [`LOCK_UNTIL_HEADER`].
pub const LOCK_MODE_HEADER: &str = "x-quarry-lock-mode";
/// The version's retain-until date, milliseconds since the Unix epoch (decimal).
pub const LOCK_UNTIL_HEADER: &str = "x-quarry-lock-until-ms";
/// `ON` while the version is under a legal hold (absent: off).
pub const LEGAL_HOLD_HEADER: &str = "x-quarry-legal-hold";

/// An object lock retention mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionMode {
    /// Deletable and changeable before its date by a caller allowed to bypass governance.
    Governance,
    /// Nobody deletes the version, or shortens or removes its retention, before its date.
    Compliance,
}

impl RetentionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RetentionMode::Governance => "GOVERNANCE",
            RetentionMode::Compliance => "COMPLIANCE",
        }
    }

    /// The S3 spelling (upper case) only.
    pub fn parse(s: &str) -> Option<RetentionMode> {
        match s {
            "GOVERNANCE" => Some(RetentionMode::Governance),
            "COMPLIANCE" => Some(RetentionMode::Compliance),
            _ => None,
        }
    }
}

/// A version's retention: its mode and the date until which it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub mode: RetentionMode,
    /// Milliseconds since the Unix epoch.
    pub until_ms: i64,
}

impl Retention {
    /// Whether it still holds at `now_ms`.
    pub fn active(&self, now_ms: i64) -> bool {
        self.until_ms > now_ms
    }
}

/// The retention stored in a version's headers. A half or unreadable entry reads as the
/// strictest retention it could be (COMPLIANCE forever): a lock is never lost to a bad entry.
pub fn retention(headers: &BTreeMap<String, String>) -> Option<Retention> {
    let mode = headers.get(LOCK_MODE_HEADER);
    let until = headers.get(LOCK_UNTIL_HEADER);
    if mode.is_none() && until.is_none() {
        return None;
    }
    let parsed = mode
        .and_then(|m| RetentionMode::parse(m))
        .zip(until.and_then(|u| u.parse::<i64>().ok()));
    Some(match parsed {
        Some((mode, until_ms)) => Retention { mode, until_ms },
        None => Retention {
            mode: RetentionMode::Compliance,
            until_ms: i64::MAX,
        },
    })
}

/// Sets (or with `None` removes) the retention of a version's headers.
pub fn set_retention(headers: &mut BTreeMap<String, String>, r: Option<Retention>) {
    match r {
        Some(r) => {
            headers.insert(LOCK_MODE_HEADER.to_owned(), r.mode.as_str().to_owned());
            headers.insert(LOCK_UNTIL_HEADER.to_owned(), r.until_ms.to_string());
        }
        None => {
            headers.remove(LOCK_MODE_HEADER);
            headers.remove(LOCK_UNTIL_HEADER);
        }
    }
}

/// Whether the version is under a legal hold.
pub fn legal_hold(headers: &BTreeMap<String, String>) -> bool {
    headers.contains_key(LEGAL_HOLD_HEADER)
}

pub fn set_legal_hold(headers: &mut BTreeMap<String, String>, on: bool) {
    if on {
        headers.insert(LEGAL_HOLD_HEADER.to_owned(), "ON".to_owned());
    } else {
        headers.remove(LEGAL_HOLD_HEADER);
    }
}

/// The object lock entries of a version's headers (what a copy never takes from its source).
pub fn is_lock_header(name: &str) -> bool {
    name == LOCK_MODE_HEADER || name == LOCK_UNTIL_HEADER || name == LEGAL_HOLD_HEADER
}

/// Why the version whose headers these are may not be deleted at `now_ms`, or `None` when it
/// may. A legal hold and a COMPLIANCE retention hold for everyone; a GOVERNANCE retention for
/// all but a caller allowed to bypass it.
pub fn deletion_refused(
    headers: &BTreeMap<String, String>,
    now_ms: i64,
    bypass_governance: bool,
) -> Option<&'static str> {
    if legal_hold(headers) {
        return Some("the version is under a legal hold");
    }
    match retention(headers) {
        Some(r) if r.active(now_ms) => match r.mode {
            RetentionMode::Compliance => {
                Some("the version is under COMPLIANCE retention until its retain-until date")
            }
            RetentionMode::Governance if !bypass_governance => Some(
                "the version is under GOVERNANCE retention (bypassing it needs \
                 x-amz-bypass-governance-retention and the permission to use it)",
            ),
            RetentionMode::Governance => None,
        },
        _ => None,
    }
}

/// Options of a DELETE beyond the key and version.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `x-amz-bypass-governance-retention`, from a caller allowed to use it.
    pub bypass_governance: bool,
    /// A conditional delete's conditions, checked under the key's lock.
    pub precondition: Option<DeletePrecondition>,
}

/// The conditions of a conditional delete: `If-Match`, `x-amz-if-match-last-modified-time` and
/// `x-amz-if-match-size` on DeleteObject, or an `<Object>`'s `ETag`, `LastModifiedTime` and
/// `Size` in DeleteObjects. They are checked against the version the delete acts on (the one
/// named, else the latest), atomically with the delete. Every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletePrecondition {
    /// An ETag (quoted or bare), a comma-separated list of them, or `*` (any version).
    pub etag: Option<String>,
    /// The version's last-modified time, in whole seconds since the epoch.
    pub mod_time_s: Option<i64>,
    /// The version's size in bytes (an encrypted object's plaintext size).
    pub size: Option<u64>,
}

/// What a conditional delete finds at its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteCheck {
    /// The conditions hold: delete.
    Proceed,
    /// There is nothing to delete (no such key or version): succeed without deleting, as a
    /// delete of a missing key does (no delete marker is added for it).
    Nothing,
    /// A condition does not hold: `PreconditionFailed`.
    Refuse,
}

impl DeletePrecondition {
    /// Whether the request set no condition at all.
    pub fn is_empty(&self) -> bool {
        self.etag.is_none() && self.mod_time_s.is_none() && self.size.is_none()
    }

    /// Checks the conditions against the version the delete acts on (`None`: there is none).
    /// A delete marker has no ETag, size or content: only `If-Match: *` matches it (the key
    /// still exists, as a deleted one).
    pub fn check(&self, target: Option<&ObjectInfo>) -> DeleteCheck {
        let Some(t) = target else {
            return DeleteCheck::Nothing;
        };
        let holds = if t.delete_marker {
            self.mod_time_s.is_none()
                && self.size.is_none()
                && self.etag.as_deref().is_none_or(|e| e.trim() == "*")
        } else {
            self.etag
                .as_deref()
                .is_none_or(|e| crate::put::etag_matches(e, &t.etag))
                && self
                    .mod_time_s
                    .is_none_or(|s| t.mod_time_ns.div_euclid(1_000_000_000) == s)
                && self.size.is_none_or(|s| t.size == s)
        };
        if holds {
            DeleteCheck::Proceed
        } else {
            DeleteCheck::Refuse
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_conditions_check_the_target_version() {
        let object = ObjectInfo {
            size: 12,
            mod_time_ns: 1_700_000_000_900_000_000,
            etag: "abc".into(),
            ..Default::default()
        };
        let marker = ObjectInfo {
            delete_marker: true,
            ..Default::default()
        };
        let cond = |etag: Option<&str>, mod_time_s, size| DeletePrecondition {
            etag: etag.map(str::to_owned),
            mod_time_s,
            size,
        };
        assert!(cond(None, None, None).is_empty());
        let all = cond(Some("\"abc\""), Some(1_700_000_000), Some(12));
        assert!(!all.is_empty());
        assert_eq!(all.check(Some(&object)), DeleteCheck::Proceed);
        assert_eq!(all.check(None), DeleteCheck::Nothing);
        for bad in [
            cond(Some("\"abd\""), Some(1_700_000_000), Some(12)),
            cond(Some("abc"), Some(1_700_000_001), Some(12)),
            cond(Some("abc"), Some(1_700_000_000), Some(13)),
        ] {
            assert_eq!(bad.check(Some(&object)), DeleteCheck::Refuse, "{bad:?}");
        }
        assert_eq!(
            cond(Some("*"), None, None).check(Some(&object)),
            DeleteCheck::Proceed
        );
        // A delete marker: only `*`.
        assert_eq!(
            cond(Some("*"), None, None).check(Some(&marker)),
            DeleteCheck::Proceed
        );
        for bad in [
            cond(Some("abc"), None, None),
            cond(None, Some(0), None),
            cond(None, None, Some(0)),
            cond(Some("*"), None, Some(0)),
        ] {
            assert_eq!(bad.check(Some(&marker)), DeleteCheck::Refuse, "{bad:?}");
        }
    }

    #[test]
    fn locks_refuse_deletion_as_s3() {
        let now = 1_000_000;
        let mut h = BTreeMap::new();
        assert_eq!(deletion_refused(&h, now, false), None);
        set_retention(
            &mut h,
            Some(Retention {
                mode: RetentionMode::Governance,
                until_ms: now + 1,
            }),
        );
        assert!(deletion_refused(&h, now, false).is_some());
        assert_eq!(deletion_refused(&h, now, true), None);
        // Expired retention holds nothing.
        assert_eq!(deletion_refused(&h, now + 1, false), None);
        set_retention(
            &mut h,
            Some(Retention {
                mode: RetentionMode::Compliance,
                until_ms: now + 1,
            }),
        );
        assert!(deletion_refused(&h, now, true).is_some());
        set_retention(&mut h, None);
        set_legal_hold(&mut h, true);
        assert!(deletion_refused(&h, now, true).is_some());
        set_legal_hold(&mut h, false);
        assert!(h.is_empty());
        // A damaged entry is the strictest lock, not none.
        h.insert(LOCK_MODE_HEADER.to_owned(), "GOVERNANCE".to_owned());
        assert_eq!(retention(&h).unwrap().mode, RetentionMode::Compliance);
        assert!(deletion_refused(&h, i64::MAX - 1, true).is_some());
    }
}
