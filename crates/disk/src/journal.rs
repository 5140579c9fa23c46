//! The version journal of one key: every version of the object the drive holds (and delete
//! markers), newest first, stored as the entries of its `quarry.meta`.
//!
//! ```text
//! quarry.meta (format 2) = entry entry ...          newest first
//! entry                  = {JSON header}[ '\n' and inline_len raw bytes ]   (see ObjectMeta)
//! ```
//!
//! The newest version is the first entry, so reading the latest needs only the beginning of the
//! file (its header and its own inline data), however many versions follow: GET and HEAD of the
//! latest, and listings, cost the same for a key with 10,000 versions as for one with one.
//! Reading a version by id, or all of them, parses every header (and skips the inline bytes of the
//! others without copying them).
//!
//! A format 1 file is a single entry without version id: it reads as a journal holding only the
//! `null` version, and the next write of the key rewrites it in format 2.

use std::ops::Range;

use bytes::Bytes;
use uuid::Uuid;

use crate::drive::DriveError;
use crate::meta::{decode_entry, ObjectMeta};

/// Every version of one key on one drive, newest first (by modification time; ties keep the
/// order of insertion, the later write first). At most one entry per version id, and at most one
/// `null` version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaJournal {
    versions: Vec<ObjectMeta>,
}

impl MetaJournal {
    pub fn new() -> MetaJournal {
        MetaJournal::default()
    }

    /// Decodes a whole `quarry.meta`; inline data are slices of `b`.
    pub fn from_shared(b: Bytes) -> Result<MetaJournal, DriveError> {
        Self::decode(&b, |r| b.slice(r))
    }

    /// Decodes a whole `quarry.meta`, copying inline data out of `b`.
    pub fn from_bytes(b: &[u8]) -> Result<MetaJournal, DriveError> {
        Self::decode(b, |r| Bytes::copy_from_slice(&b[r]))
    }

    /// Decodes every version's header; inline data are skipped (`inline` is `None`).
    pub fn from_bytes_without_inline(b: &[u8]) -> Result<MetaJournal, DriveError> {
        Self::decode(b, |_| Bytes::new()).map(|mut j| {
            for v in &mut j.versions {
                v.inline = None;
            }
            j
        })
    }

    fn decode(b: &[u8], inline: impl Fn(Range<usize>) -> Bytes) -> Result<MetaJournal, DriveError> {
        let mut versions: Vec<ObjectMeta> = Vec::new();
        // Ids seen so far: a set, so a long journal decodes in linear time.
        let mut seen: std::collections::HashSet<Option<Uuid>> = std::collections::HashSet::new();
        let mut pos = 0;
        while pos < b.len() || versions.is_empty() {
            let (meta, end) = decode_entry(b, pos, &inline)?;
            if meta.version == 1 && (pos != 0 || end != b.len()) {
                return Err(DriveError::CorruptMeta(
                    "a format 1 entry is not alone in its file".into(),
                ));
            }
            if !seen.insert(meta.version_id) {
                return Err(DriveError::CorruptMeta(format!(
                    "version {} appears twice",
                    version_name(meta.version_id)
                )));
            }
            versions.push(meta);
            pos = end;
        }
        Ok(MetaJournal { versions })
    }

    /// Encodes the journal as written to `quarry.meta` (always the current format).
    pub fn to_bytes(&self) -> Vec<u8> {
        let size: usize = self
            .versions
            .iter()
            .map(|v| 512 + v.inline.as_ref().map_or(0, |b| b.len() + 1))
            .sum();
        let mut out = Vec::with_capacity(size);
        for v in &self.versions {
            v.write_to(&mut out);
        }
        out
    }

    /// Newest first.
    pub fn versions(&self) -> &[ObjectMeta] {
        &self.versions
    }

    pub fn into_versions(self) -> Vec<ObjectMeta> {
        self.versions
    }

    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    pub fn len(&self) -> usize {
        self.versions.len()
    }

    /// The newest version (perhaps a delete marker).
    pub fn latest(&self) -> Option<&ObjectMeta> {
        self.versions.first()
    }

    /// The version `version_id` (`None`: the `null` version).
    pub fn get(&self, version_id: Option<Uuid>) -> Option<&ObjectMeta> {
        self.versions.iter().find(|v| v.version_id == version_id)
    }

    /// Adds `meta` as a version, in its place by modification time, replacing the version of the
    /// same id if there is one (which is returned: its data dir, when it differs from the new
    /// one's, is no longer referenced).
    pub fn insert(&mut self, meta: ObjectMeta) -> Option<ObjectMeta> {
        let replaced = self.remove(meta.version_id);
        let at = self
            .versions
            .iter()
            .position(|v| v.mod_time_ns <= meta.mod_time_ns)
            .unwrap_or(self.versions.len());
        self.versions.insert(at, meta);
        replaced
    }

    /// Removes the version `version_id` and returns it.
    pub fn remove(&mut self, version_id: Option<Uuid>) -> Option<ObjectMeta> {
        let i = self
            .versions
            .iter()
            .position(|v| v.version_id == version_id)?;
        Some(self.versions.remove(i))
    }

    /// Whether some version still uses the data dir `d`.
    pub fn uses_data_dir(&self, d: Uuid) -> bool {
        self.versions.iter().any(|v| v.data_dir == Some(d))
    }

    /// The data dirs of every version.
    pub fn data_dirs(&self) -> impl Iterator<Item = Uuid> + '_ {
        self.versions.iter().filter_map(|v| v.data_dir)
    }
}

/// How a version id reads in messages and logs: the UUID, or `null`.
pub fn version_name(version_id: Option<Uuid>) -> String {
    version_id.map_or_else(|| "null".to_string(), |u| u.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{ErasureInfo, PartInfo, META_VERSION};

    fn v(id: Option<Uuid>, t: i64, inline: Option<&[u8]>) -> ObjectMeta {
        ObjectMeta {
            version: META_VERSION,
            version_id: id,
            delete_marker: false,
            size: inline.map_or(1 << 20, |b| b.len() as u64),
            mod_time_ns: t,
            etag: format!("etag-{t}"),
            headers: Default::default(),
            user_meta: Default::default(),
            checksums: Default::default(),
            erasure: ErasureInfo {
                codec: "rs-vandermonde-gf8".into(),
                bitrot: "blake3-256".into(),
                data: 2,
                parity: 2,
                block_size: 1 << 20,
                index: 1,
                distribution: vec![1, 2, 3, 4],
            },
            data_dir: if inline.is_some() {
                None
            } else {
                Some(Uuid::new_v4())
            },
            parts: vec![PartInfo {
                number: 1,
                size: 1,
                etag: "e".into(),
            }],
            inline: inline.map(Bytes::copy_from_slice),
        }
    }

    fn marker(id: Option<Uuid>, t: i64) -> ObjectMeta {
        ObjectMeta {
            delete_marker: true,
            size: 0,
            data_dir: None,
            inline: None,
            parts: vec![],
            erasure: ErasureInfo::default(),
            ..v(id, t, None)
        }
    }

    #[test]
    fn newest_first_replace_by_id_and_round_trip() {
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        let mut j = MetaJournal::new();
        assert!(j.insert(v(None, 10, Some(b"null one"))).is_none());
        assert!(j.insert(v(Some(a), 20, None)).is_none());
        assert!(j.insert(marker(Some(b), 30)).is_none());
        // A late heal of an older version goes in its place, not on top.
        let older = Uuid::new_v4();
        j.insert(v(Some(older), 5, Some(b"")));
        let order: Vec<_> = j.versions().iter().map(|v| v.mod_time_ns).collect();
        assert_eq!(order, [30, 20, 10, 5]);
        assert!(j.latest().unwrap().delete_marker);

        // A suspended write replaces the null version and becomes the latest.
        let replaced = j.insert(v(None, 40, Some(b"null two"))).unwrap();
        assert_eq!(replaced.inline.as_deref(), Some(&b"null one"[..]));
        assert_eq!(j.len(), 4);
        assert_eq!(j.latest().unwrap().version_id, None);

        let bytes = j.to_bytes();
        let back = MetaJournal::from_shared(Bytes::from(bytes.clone())).unwrap();
        assert_eq!(back, j);
        assert_eq!(MetaJournal::from_bytes(&bytes).unwrap(), j);
        let headers = MetaJournal::from_bytes_without_inline(&bytes).unwrap();
        assert!(headers.versions().iter().all(|v| v.inline.is_none()));
        assert_eq!(headers.len(), 4);
        // The first entry alone is the latest.
        let (latest, _) = decode_entry(&bytes, 0, |r| Bytes::copy_from_slice(&bytes[r])).unwrap();
        assert_eq!(&latest, j.latest().unwrap());

        assert_eq!(j.get(Some(a)).unwrap().mod_time_ns, 20);
        assert_eq!(j.remove(Some(a)).unwrap().mod_time_ns, 20);
        assert!(j.get(Some(a)).is_none());
        assert!(j.remove(Some(a)).is_none());
    }

    /// Bytes written by the format 1 encoder (before versioning) read as the null version.
    #[test]
    fn format_1_file_reads_as_the_null_version() {
        let old = br#"{"version":1,"size":3,"mod_time_ns":1700000000000000000,"etag":"abc","headers":{"content-type":"text/plain"},"user_meta":{},"checksums":{},"erasure":{"codec":"rs-vandermonde-gf8","bitrot":"blake3-256","data":2,"parity":2,"block_size":1048576,"index":1,"distribution":[1,2,3,4]},"data_dir":null,"parts":[{"number":1,"size":3,"etag":"abc"}],"inline_len":5}
hello"#;
        let j = MetaJournal::from_bytes(old).unwrap();
        assert_eq!(j.len(), 1);
        let m = j.latest().unwrap();
        assert_eq!(m.version, 1);
        assert_eq!(m.version_id, None);
        assert!(!m.delete_marker);
        assert_eq!(m.inline.as_deref(), Some(&b"hello"[..]));
        assert_eq!(ObjectMeta::from_bytes(old).unwrap(), *m);
        // Rewritten, it is format 2 and reads back the same (but for the format number).
        let again = MetaJournal::from_bytes(&j.to_bytes()).unwrap();
        let mut expect = m.clone();
        expect.version = META_VERSION;
        assert_eq!(again.latest().unwrap(), &expect);

        // A format 1 entry followed by anything is corrupt: format 1 files held one object.
        let mut two = old.to_vec();
        two.extend_from_slice(&v(None, 1, None).to_bytes());
        assert!(matches!(
            MetaJournal::from_bytes(&two),
            Err(DriveError::CorruptMeta(_))
        ));
    }

    #[test]
    fn corrupt_journals_are_refused() {
        let id = Uuid::new_v4();
        let mut dup = v(Some(id), 2, None).to_bytes();
        dup.extend_from_slice(&v(Some(id), 1, None).to_bytes());
        let mut cut = v(Some(id), 2, Some(b"abcdef")).to_bytes();
        cut.extend_from_slice(&v(None, 1, Some(b"xyz")).to_bytes());
        cut.pop();
        let mut bad_marker = marker(None, 1);
        bad_marker.data_dir = Some(Uuid::new_v4());
        let mut trailing = v(None, 1, None).to_bytes();
        trailing.extend_from_slice(b"  x");
        for b in [
            dup,
            cut,
            bad_marker.to_bytes(),
            trailing,
            b"".to_vec(),
            br#"{"version":1,"version_id":"5f0c7b8e-0000-4000-8000-000000000000","size":0}"#
                .to_vec(),
        ] {
            assert!(
                matches!(MetaJournal::from_bytes(&b), Err(DriveError::CorruptMeta(_))),
                "{}",
                String::from_utf8_lossy(&b)
            );
        }
    }
}
