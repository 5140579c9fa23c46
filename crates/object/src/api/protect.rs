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

/// When the version's metadata was last changed in place (nanoseconds since the Unix epoch,
/// decimal). Two copies of one version that differ in it are different copies for quorum: the
/// change is made on a write quorum, so the copies that missed it never win a read.
pub const META_UPDATED_HEADER: &str = "x-quarry-meta-updated";

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

/// The stored update stamp of a version's metadata (0: never changed in place).
pub fn meta_updated_ns(headers: &BTreeMap<String, String>) -> i64 {
    headers
        .get(META_UPDATED_HEADER)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
