//! `quarry.meta`: the per-drive, per-key metadata file: the key's version journal, newest
//! first. Versioned JSON.

use std::collections::BTreeMap;
use std::ops::Range;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::drive::DriveError;

/// The metadata format version this build writes. Version 1 (one object per file, no version
/// id) is still read: such a file is a journal holding only the `null` version.
pub const META_VERSION: u32 = 2;

/// The oldest metadata format version this build reads.
pub const META_VERSION_MIN: u32 = 1;

/// When a version's metadata was last changed in place (nanoseconds since the Unix epoch,
/// decimal). Two copies of one version that differ in it are different copies for quorum. The
/// object layer writes it; named here because a listing keeps it ([`ObjectMeta::listing_view`]).
pub const META_UPDATED_HEADER: &str = "x-quarry-meta-updated";

/// The package format of an encrypted version's data; its presence says the version is
/// encrypted. The object layer writes it; named here because a listing keeps it (an encrypted
/// version lists its plaintext size).
pub const SSE_FORMAT_HEADER: &str = "x-quarry-internal-sse-format";

/// The stored header entries a listing reads, the only ones [`ObjectMeta::listing_view`] keeps.
pub const LISTED_HEADERS: [&str; 2] = [META_UPDATED_HEADER, SSE_FORMAT_HEADER];

/// How an object is erasure coded; identical on every drive of the object except `index`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErasureInfo {
    /// The codec, recorded so old data is never read with a new guess, e.g. "rs-vandermonde-gf8".
    pub codec: String,
    /// The bitrot hash framed before every chunk, e.g. "blake3-256".
    pub bitrot: String,
    pub data: u8,
    pub parity: u8,
    pub block_size: u32,
    /// The shard this drive holds, 1-based (1..=data+parity).
    pub index: u8,
    /// `distribution[i]` is the shard index (1-based) held by drive position `i` of the set.
    pub distribution: Vec<u8>,
}

/// One part of an object (a plain PUT has exactly one, number 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartInfo {
    pub number: u32,
    /// Bytes of object data in this part.
    pub size: u64,
    pub etag: String,
}

/// Metadata of one version of an object on one drive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// The format version it was read from; [`ObjectMeta::to_bytes`] always writes
    /// [`META_VERSION`].
    pub version: u32,
    /// The S3 version id; `None` is the `null` version (unversioned and suspended writes, and
    /// every object written before versioning existed).
    #[serde(default)]
    pub version_id: Option<Uuid>,
    /// A delete marker: no data (`size` 0, no parts, no data dir, no inline data).
    #[serde(default)]
    pub delete_marker: bool,
    /// Object size in bytes.
    pub size: u64,
    /// Last-modified time, nanoseconds since the Unix epoch.
    pub mod_time_ns: i64,
    /// Quoted-less hex ETag (e.g. `9e107d9d372bb6826bd81d3542a419d6`, or `<hex>-N` for multipart).
    pub etag: String,
    /// Standard headers stored with the object, lower-case names: content-type, cache-control,
    /// content-disposition, content-encoding, content-language, expires.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// User metadata, lower-case names without the `x-amz-meta-` prefix.
    #[serde(default)]
    pub user_meta: BTreeMap<String, String>,
    /// Checksums of the whole object, by algorithm name (e.g. "crc32c" -> base64 value).
    #[serde(default)]
    pub checksums: BTreeMap<String, String>,
    pub erasure: ErasureInfo,
    /// The directory holding `part.N` files; `None` when the shard is inline.
    pub data_dir: Option<Uuid>,
    pub parts: Vec<PartInfo>,
    /// This drive's framed shard bytes when the object is small enough to be stored inline.
    /// Decoded with [`ObjectMeta::from_shared`] they are a slice of the file's bytes, and a GET
    /// hands slices of them to the body: inline shards are not copied either.
    #[serde(default, with = "inline_b64", skip_serializing_if = "Option::is_none")]
    pub inline: Option<Bytes>,
}

mod inline_b64 {
    use base64::Engine;
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Bytes>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_some(&base64::engine::general_purpose::STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Bytes>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| {
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map(Bytes::from)
                .map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}

/// Encoding of one version (an entry of the journal, see [`MetaJournal`]):
///
/// ```text
/// {JSON header: every field of ObjectMeta except `inline`, plus "inline_len": N if inline}
/// [ '\n' and then N raw bytes of inline shard data ]
/// ```
///
/// The header is plain JSON and always comes first, so a listing reads only the first few KiB
/// of a file whatever the size of its inline data, and inline data is stored raw (no base64).
/// A version 1 file is exactly one such entry without `version_id` and `delete_marker`.
/// (The serde derive of [`ObjectMeta`], with `inline` in base64, is for other encodings, e.g.
/// RPC; it is not the file format.)
impl ObjectMeta {
    /// Encodes the metadata as one entry (a journal of one version is this alone).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(512 + self.inline.as_ref().map_or(0, |b| b.len() + 1));
        self.write_to(&mut out);
        out
    }

    /// Appends the entry's encoding to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let ObjectMeta {
            version: _,
            version_id,
            delete_marker,
            size,
            mod_time_ns,
            etag,
            headers,
            user_meta,
            checksums,
            erasure,
            data_dir,
            parts,
            inline,
        } = self;
        let header = HeaderRef {
            version: META_VERSION,
            version_id: *version_id,
            delete_marker: *delete_marker,
            size: *size,
            mod_time_ns: *mod_time_ns,
            etag,
            headers,
            user_meta,
            checksums,
            erasure,
            data_dir: *data_dir,
            parts,
            inline_len: inline.as_ref().map(|b| b.len() as u64),
        };
        // Strings, integers, maps with string keys and uuids: serializing cannot fail.
        serde_json::to_writer(&mut *out, &header).expect("ObjectMeta serializes to JSON");
        if let Some(b) = inline {
            out.push(b'\n');
            out.extend_from_slice(b);
        }
    }

    /// What a listing reads of a version, and nothing else: what tells versions apart for
    /// quorum (id, delete marker, time, ETag, size, layout, data dir, metadata-rewrite time),
    /// and what a listed entry shows (an encrypted version's plaintext size comes from its
    /// format entry and part sizes). Dropped: every other header entry, the user metadata, the
    /// checksums, the codec and bitrot names, part ETags and inline data. A walk returns and
    /// keeps this view: a plain object's kept copy is about a third of the whole, and a
    /// remote walk sends that much less. Not for reading data or rewriting metadata.
    pub fn listing_view(mut self) -> ObjectMeta {
        // Collected anew, so an object without the listed entries holds no map node.
        self.headers = std::mem::take(&mut self.headers)
            .into_iter()
            .filter(|(k, _)| LISTED_HEADERS.contains(&k.as_str()))
            .collect();
        self.user_meta = BTreeMap::new();
        self.checksums = BTreeMap::new();
        self.erasure.codec = String::new();
        self.erasure.bitrot = String::new();
        for p in &mut self.parts {
            p.etag = String::new();
        }
        self.inline = None;
        self
    }

    /// The `null` version (`version_id` is `None`)?
    pub fn is_null_version(&self) -> bool {
        self.version_id.is_none()
    }

    /// Decodes `quarry.meta`. The `version` field is read first and alone: a version other
    /// than [`META_VERSION`] is `UnsupportedVersion` whatever the rest looks like; a header
    /// that does not parse, or inline data of the wrong length, is `CorruptMeta`. The inline
    /// data is copied out of `b`; [`ObjectMeta::from_shared`] slices it instead.
    pub fn from_bytes(b: &[u8]) -> Result<ObjectMeta, DriveError> {
        Self::decode(b, |r| Bytes::copy_from_slice(&b[r]))
    }

    /// As [`ObjectMeta::from_bytes`], but the inline data is a slice of `b` (no copy): what
    /// drives and the RPC use, which hold the file's bytes as [`Bytes`] already.
    pub fn from_shared(b: Bytes) -> Result<ObjectMeta, DriveError> {
        Self::decode(&b, |r| b.slice(r))
    }

    /// Decodes exactly one entry filling all of `b`.
    fn decode(
        b: &[u8],
        inline: impl FnOnce(Range<usize>) -> Bytes,
    ) -> Result<ObjectMeta, DriveError> {
        let (meta, end) = decode_entry(b, 0, inline)?;
        if end != b.len() {
            return Err(corrupt(format!("{} bytes after the entry", b.len() - end)));
        }
        Ok(meta)
    }

    /// Decodes only the header (`inline` is `None`): what a listing needs. `b` may be just the
    /// beginning of the file, as long as it holds the whole header; the inline data is neither
    /// read nor checked.
    pub fn from_bytes_without_inline(b: &[u8]) -> Result<ObjectMeta, DriveError> {
        parse_header(b).map(|(meta, _, _)| meta)
    }

    /// The length of the first entry of `b` (header and inline data), read from its header
    /// alone: how much of a journal must be read to decode its latest version.
    pub fn entry_len(b: &[u8]) -> Result<usize, DriveError> {
        let (_, inline_len, header_len) = parse_header(b)?;
        Ok(match inline_len {
            None => header_len,
            Some(n) => header_len
                .saturating_add(1)
                .saturating_add(usize::try_from(n).unwrap_or(usize::MAX)),
        })
    }

    /// Decodes the first entry of a journal (its latest version) from `b`, which may hold just
    /// that entry or the whole file; inline data are slices of `b`.
    pub fn first_entry(b: Bytes) -> Result<ObjectMeta, DriveError> {
        decode_entry(&b, 0, |r| b.slice(r)).map(|(m, _)| m)
    }

    /// Whether decoding `b` failed only because it ends inside the header (so a longer prefix
    /// of the file is needed). Used by readers that read the beginning of a file first.
    pub(crate) fn header_incomplete(b: &[u8]) -> bool {
        let mut it = serde_json::Deserializer::from_slice(b).into_iter::<serde::de::IgnoredAny>();
        matches!(it.next(), Some(Err(e)) if e.is_eof())
    }
}

fn corrupt(why: String) -> DriveError {
    DriveError::CorruptMeta(why)
}

/// Decodes the entry starting at `b[start..]`; returns it and where it ends (the next entry's
/// start). Its inline data, if any, is `inline(range of b)`.
pub(crate) fn decode_entry(
    b: &[u8],
    start: usize,
    inline: impl FnOnce(Range<usize>) -> Bytes,
) -> Result<(ObjectMeta, usize), DriveError> {
    let (mut meta, inline_len, len) = parse_header(&b[start..])?;
    let end = start + len;
    match inline_len {
        None => Ok((meta, end)),
        Some(n) => {
            let rest = &b[end..];
            let n_usize = usize::try_from(n).unwrap_or(usize::MAX);
            match rest.split_first() {
                Some((b'\n', data)) if data.len() >= n_usize => {
                    meta.inline = Some(inline(end + 1..end + 1 + n_usize));
                    Ok((meta, end + 1 + n_usize))
                }
                _ => Err(corrupt(format!(
                    "inline data should be {n} bytes, the file holds {} after the header",
                    rest.len().saturating_sub(1)
                ))),
            }
        }
    }
}

/// Parses the JSON header at the start of `b`: the version alone first, then the whole header.
/// Returns the metadata (without inline data), the announced inline length and where the
/// header ends.
fn parse_header(b: &[u8]) -> Result<(ObjectMeta, Option<u64>, usize), DriveError> {
    #[derive(Deserialize)]
    struct Probe {
        version: u32,
    }
    let mut probe = serde_json::Deserializer::from_slice(b).into_iter::<Probe>();
    let version = match probe.next() {
        Some(Ok(p)) => p.version,
        Some(Err(e)) => return Err(corrupt(e.to_string())),
        None => return Err(corrupt("empty file".into())),
    };
    if !(META_VERSION_MIN..=META_VERSION).contains(&version) {
        return Err(DriveError::UnsupportedVersion {
            found: version,
            supported: META_VERSION,
        });
    }
    let mut it = serde_json::Deserializer::from_slice(b).into_iter::<Header>();
    let h = match it.next() {
        Some(Ok(h)) => h,
        Some(Err(e)) => return Err(corrupt(e.to_string())),
        None => return Err(corrupt("empty file".into())),
    };
    let end = it.byte_offset();
    if h.version == 1 && (h.version_id.is_some() || h.delete_marker) {
        return Err(corrupt(
            "a version 1 entry cannot carry a version id or be a delete marker".into(),
        ));
    }
    if h.delete_marker && (h.data_dir.is_some() || h.inline_len.is_some()) {
        return Err(corrupt("a delete marker with data".into()));
    }
    let meta = ObjectMeta {
        version: h.version,
        version_id: h.version_id,
        delete_marker: h.delete_marker,
        size: h.size,
        mod_time_ns: h.mod_time_ns,
        etag: h.etag,
        headers: h.headers,
        user_meta: h.user_meta,
        checksums: h.checksums,
        erasure: h.erasure,
        data_dir: h.data_dir,
        parts: h.parts,
        inline: None,
    };
    Ok((meta, h.inline_len, end))
}

/// The JSON header of `quarry.meta`, as written. Its fields follow `ObjectMeta`'s: adding a
/// field there fails to compile in `to_bytes` until it is added here too.
#[derive(Serialize)]
struct HeaderRef<'a> {
    version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    version_id: Option<Uuid>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    delete_marker: bool,
    size: u64,
    mod_time_ns: i64,
    etag: &'a str,
    headers: &'a BTreeMap<String, String>,
    user_meta: &'a BTreeMap<String, String>,
    checksums: &'a BTreeMap<String, String>,
    erasure: &'a ErasureInfo,
    data_dir: Option<Uuid>,
    parts: &'a [PartInfo],
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_len: Option<u64>,
}

/// The JSON header of `quarry.meta`, as read.
#[derive(Deserialize)]
struct Header {
    version: u32,
    #[serde(default)]
    version_id: Option<Uuid>,
    #[serde(default)]
    delete_marker: bool,
    size: u64,
    mod_time_ns: i64,
    etag: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    user_meta: BTreeMap<String, String>,
    #[serde(default)]
    checksums: BTreeMap<String, String>,
    erasure: ErasureInfo,
    data_dir: Option<Uuid>,
    parts: Vec<PartInfo>,
    #[serde(default)]
    inline_len: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(inline: Option<Vec<u8>>) -> ObjectMeta {
        let inline = inline.map(Bytes::from);
        ObjectMeta {
            version: META_VERSION,
            version_id: Some(Uuid::new_v4()),
            delete_marker: false,
            size: 12345,
            mod_time_ns: 1_700_000_000_123_456_789,
            etag: "9e107d9d372bb6826bd81d3542a419d6".into(),
            headers: [("content-type".to_string(), "text/plain".to_string())].into(),
            user_meta: [("owner".to_string(), "ünï \"quoted\"".to_string())].into(),
            checksums: [("crc32c".to_string(), "AAAAAA==".to_string())].into(),
            erasure: ErasureInfo {
                codec: "rs-vandermonde-gf8".into(),
                bitrot: "blake3-256".into(),
                data: 2,
                parity: 2,
                block_size: 1 << 20,
                index: 3,
                distribution: vec![3, 4, 1, 2],
            },
            data_dir: if inline.is_some() {
                None
            } else {
                Some(Uuid::new_v4())
            },
            parts: vec![PartInfo {
                number: 1,
                size: 12345,
                etag: "9e107d9d372bb6826bd81d3542a419d6".into(),
            }],
            inline,
        }
    }

    #[test]
    fn the_listing_view_keeps_what_a_listing_reads_and_nothing_else() {
        let mut m = sample(Some(vec![7; 100]));
        m.headers
            .insert(META_UPDATED_HEADER.into(), "1700000000999".into());
        m.headers.insert(SSE_FORMAT_HEADER.into(), "pkg-1".into());
        m.headers.insert("x-quarry-tagging".into(), "a=b".into());
        let v = m.clone().listing_view();
        let expected = ObjectMeta {
            headers: [
                (META_UPDATED_HEADER.to_string(), "1700000000999".to_string()),
                (SSE_FORMAT_HEADER.to_string(), "pkg-1".to_string()),
            ]
            .into(),
            user_meta: BTreeMap::new(),
            checksums: BTreeMap::new(),
            erasure: ErasureInfo {
                codec: String::new(),
                bitrot: String::new(),
                ..m.erasure.clone()
            },
            parts: vec![PartInfo {
                number: 1,
                size: 12345,
                etag: String::new(),
            }],
            inline: None,
            ..m.clone()
        };
        assert_eq!(v, expected);
        // A plain object keeps no header entry at all.
        assert!(sample(None).listing_view().headers.is_empty());
    }

    #[test]
    fn round_trip() {
        for m in [
            sample(None),
            sample(Some(Vec::new())),
            sample(Some((0..=255u8).cycle().take(100_000).collect())),
        ] {
            let b = m.to_bytes();
            assert_eq!(ObjectMeta::from_bytes(&b).unwrap(), m);
            // from_shared decodes the same, its inline data a slice of the file's bytes.
            let shared = Bytes::from(b.clone());
            let from_shared = ObjectMeta::from_shared(shared.clone()).unwrap();
            assert_eq!(from_shared, m);
            if let Some(i) = &from_shared.inline {
                let file = shared.as_ptr_range();
                assert!(
                    file.contains(&i.as_ptr()) || i.is_empty(),
                    "inline data was copied"
                );
            }
            let mut no_inline = m.clone();
            no_inline.inline = None;
            assert_eq!(
                ObjectMeta::from_bytes_without_inline(&b).unwrap(),
                no_inline
            );

            // The header is plain JSON; the inline bytes follow it raw.
            let header_len = b.iter().position(|&c| c == b'\n').unwrap_or(b.len());
            let v: serde_json::Value = serde_json::from_slice(&b[..header_len]).unwrap();
            assert_eq!(v["version"], META_VERSION);
            assert!(v.get("inline").is_none());
            assert_eq!(
                v.get("inline_len").and_then(|n| n.as_u64()),
                m.inline.as_ref().map(|i| i.len() as u64)
            );
            if let Some(i) = &m.inline {
                assert_eq!(&b[header_len + 1..], &i[..]);
            }
            // A listing may read just the beginning of the file.
            let head = &b[..(header_len + 10).min(b.len())];
            assert_eq!(
                ObjectMeta::from_bytes_without_inline(head).unwrap(),
                no_inline
            );
            assert!(!ObjectMeta::header_incomplete(head));
            assert!(ObjectMeta::header_incomplete(&b[..header_len - 1]));
            assert!(ObjectMeta::header_incomplete(&b[..1]));
        }
        assert!(!ObjectMeta::header_incomplete(b"{]"));
        assert!(!ObjectMeta::header_incomplete(b""));
    }

    #[test]
    fn unknown_version_is_refused_before_the_rest_is_parsed() {
        let mut v: serde_json::Value = serde_json::from_slice(&sample(None).to_bytes()).unwrap();
        v["version"] = (META_VERSION + 1).into();
        v["erasure"] = "a shape this version does not know".into();
        let b = serde_json::to_vec(&v).unwrap();
        for r in [
            ObjectMeta::from_bytes(&b),
            ObjectMeta::from_bytes_without_inline(&b),
        ] {
            match r {
                Err(DriveError::UnsupportedVersion { found, supported })
                    if found == META_VERSION + 1 && supported == META_VERSION => {}
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn corrupt_is_corrupt() {
        let good = sample(Some(vec![1, 2, 3])).to_bytes();
        let header_len = good.iter().position(|&c| c == b'\n').unwrap();
        let mut extra = good.clone();
        extra.push(0);
        let mut plain = sample(None).to_bytes();
        plain.extend_from_slice(b"\n");
        let cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"{".to_vec(),
            b"[1,2]".to_vec(),
            br#"{"size":1}"#.to_vec(),
            br#"{"version":1}"#.to_vec(),
            br#"{"version":"1"}"#.to_vec(),
            good[..header_len / 2].to_vec(),
            good[..good.len() - 1].to_vec(),
            good[..header_len].to_vec(),
            extra,
            plain,
        ];
        for b in &cases {
            assert!(
                matches!(ObjectMeta::from_bytes(b), Err(DriveError::CorruptMeta(_))),
                "{:?}",
                String::from_utf8_lossy(b)
            );
        }
    }
}
