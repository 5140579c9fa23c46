//! `quarry.meta`: the per-drive, per-object metadata file. Versioned JSON.

use std::collections::BTreeMap;
use std::ops::Range;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::drive::DriveError;

/// The metadata format version this build writes and reads.
pub const META_VERSION: u32 = 1;

/// How an object is erasure coded; identical on every drive of the object except `index`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// Metadata of one object on one drive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// Always [`META_VERSION`] when written by this build.
    pub version: u32,
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

/// Encoding of `quarry.meta` (version 1):
///
/// ```text
/// {JSON header: every field of ObjectMeta except `inline`, plus "inline_len": N if inline}
/// [ '\n' and then N raw bytes of inline shard data ]
/// ```
///
/// The header is plain JSON and always comes first, so a listing reads only the first few KiB
/// of a file whatever the size of its inline data, and inline data is stored raw (no base64).
/// (The serde derive of [`ObjectMeta`], with `inline` in base64, is for other encodings, e.g.
/// RPC; it is not the file format.)
impl ObjectMeta {
    /// Encodes the metadata as written to `quarry.meta`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let ObjectMeta {
            version,
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
            version: *version,
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
        let tail = inline.as_ref().map_or(0, |b| b.len() + 1);
        let mut out = Vec::with_capacity(512 + tail);
        // Strings, integers, maps with string keys and uuids: serializing cannot fail.
        serde_json::to_writer(&mut out, &header).expect("ObjectMeta serializes to JSON");
        if let Some(b) = inline {
            out.push(b'\n');
            out.extend_from_slice(b);
        }
        out
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

    fn decode(
        b: &[u8],
        inline: impl FnOnce(Range<usize>) -> Bytes,
    ) -> Result<ObjectMeta, DriveError> {
        let (mut meta, inline_len, end) = parse_header(b)?;
        let rest = &b[end..];
        meta.inline = match inline_len {
            None if rest.is_empty() => None,
            None => return Err(corrupt(format!("{} bytes after the header", rest.len()))),
            Some(n) => match rest.split_first() {
                Some((b'\n', data)) if data.len() as u64 == n => Some(inline(end + 1..b.len())),
                _ => {
                    return Err(corrupt(format!(
                        "inline data should be {n} bytes, the file holds {} after the header",
                        rest.len().saturating_sub(1)
                    )))
                }
            },
        };
        Ok(meta)
    }

    /// Decodes only the header (`inline` is `None`): what a listing needs. `b` may be just the
    /// beginning of the file, as long as it holds the whole header; the inline data is neither
    /// read nor checked.
    pub fn from_bytes_without_inline(b: &[u8]) -> Result<ObjectMeta, DriveError> {
        parse_header(b).map(|(meta, _, _)| meta)
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
    if version != META_VERSION {
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
    let meta = ObjectMeta {
        version: h.version,
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
            assert_eq!(v["version"], 1);
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
        v["version"] = 2.into();
        v["erasure"] = "a shape version 1 does not know".into();
        let b = serde_json::to_vec(&v).unwrap();
        for r in [
            ObjectMeta::from_bytes(&b),
            ObjectMeta::from_bytes_without_inline(&b),
        ] {
            match r {
                Err(DriveError::UnsupportedVersion {
                    found: 2,
                    supported: 1,
                }) => {}
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
