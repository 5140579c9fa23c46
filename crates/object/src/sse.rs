//! Encryption at rest in the object layer. The front end decides which key an object gets (and
//! how to open it again); here the data is sealed and opened:
//!
//! - PUT: each block of plaintext (16 packages of 64 KiB) is hashed (MD5, checksums: over the
//!   plaintext, as S3 gives them) and then sealed with crates/crypt before erasure coding, so
//!   shards and bitrot hashes cover ciphertext. Sealed blocks are exactly the erasure block of
//!   the version (recorded in its `ErasureInfo`), so the stored geometry is as for any object.
//! - Metadata: `size` and part sizes are the stored (sealed) sizes the erasure code works on;
//!   the plaintext sizes follow from them ([`quarry_crypt::decrypted_size`]). The front end's
//!   record (sealed key, kind) and the package format are reserved internal entries of the
//!   version's `headers` (`x-quarry-internal-sse-*`), never sent as headers, kept by metadata
//!   rewrites, and given to the front end as [`ObjectInfo::encryption`] with the plaintext size.
//! - GET: a plaintext range maps to the packages holding it; only those are read and opened,
//!   part by part, each with its own part key. Plain GETs of encrypted objects are refused.

use std::collections::BTreeMap;
use std::collections::VecDeque;

use bytes::BytesMut;
use futures::StreamExt;
use quarry_crypt::{
    decrypted_size, Decryptor, ObjectKey, PartKey, PACKAGE_SIZE, SEALED_PACKAGE_SIZE,
};
use quarry_disk::ObjectMeta;
use uuid::Uuid;

use crate::api::{Encryption, ObjectStream};
use crate::error::{Error, Result};

/// Prefix of the reserved metadata entries of an encrypted version.
pub(crate) const PREFIX: &str = crate::api::SSE_RECORD_PREFIX;
/// The package format of the data (the object layer's own entry; the drives name it too, as a
/// walk keeps it in its listing view).
const FORMAT: &str = quarry_disk::SSE_FORMAT_HEADER;
/// An encrypted multipart upload's part ETags: `md5` (the plaintext's MD5, SSE-S3) or `keyed`
/// (derived with the object key; see [`keyed_etag`]).
const ETAG_KIND: &str = "x-quarry-internal-sse-etag";
/// A completed encrypted multipart object's part keys: for each stored part in order, the
/// number it was uploaded as and the hex id of that upload of the part (its data dir),
/// `N:hex` separated by commas (see [`quarry_crypt::ObjectKey::upload_part_key`]). Absent:
/// part i is sealed with `part_key(i)` (a single-part PUT).
const PART_KEYS: &str = "x-quarry-internal-sse-parts";

/// Plaintext bytes per block when encrypting with erasure block size `block_size`: whole
/// packages, at least one.
pub(crate) fn plain_block(block_size: usize) -> usize {
    (block_size / PACKAGE_SIZE).max(1) * PACKAGE_SIZE
}

/// The erasure block size of an encrypted version: one sealed plaintext block.
pub(crate) fn stored_block(block_size: usize) -> usize {
    plain_block(block_size) / PACKAGE_SIZE * SEALED_PACKAGE_SIZE
}

/// Records `enc` in a new version's headers.
pub(crate) fn record(headers: &mut BTreeMap<String, String>, enc: &Encryption) {
    headers.retain(|k, _| !k.starts_with(PREFIX));
    for (k, v) in &enc.record {
        headers.insert(format!("{PREFIX}{k}"), v.clone());
    }
    headers.insert(FORMAT.to_string(), quarry_crypt::ALGORITHM.to_string());
}

/// Records `enc` in a new multipart upload's headers, with how its parts' ETags are made.
pub(crate) fn record_upload(headers: &mut BTreeMap<String, String>, enc: &Encryption) {
    record(headers, enc);
    let kind = if enc.etag_is_md5 { "md5" } else { "keyed" };
    headers.insert(ETAG_KIND.to_string(), kind.to_string());
}

/// Whether an upload's (or a version's) headers say its data is encrypted.
pub(crate) fn headers_encrypted(headers: &BTreeMap<String, String>) -> bool {
    headers.contains_key(FORMAT)
}

/// The ETag of a part of an encrypted upload whose plaintext has MD5 `md5`.
pub(crate) fn part_etag(
    headers: &BTreeMap<String, String>,
    key: &ObjectKey,
    md5: &[u8; 16],
) -> String {
    match headers.get(ETAG_KIND).map(String::as_str) {
        Some("md5") => hex::encode(md5),
        _ => keyed_etag(key, md5),
    }
}

/// Records in a completed object's headers which upload of which part each stored part is.
pub(crate) fn record_part_keys(headers: &mut BTreeMap<String, String>, parts: &[(u32, Uuid)]) {
    let v: Vec<String> = parts
        .iter()
        .map(|(n, id)| format!("{n}:{}", id.simple()))
        .collect();
    headers.insert(PART_KEYS.to_string(), v.join(","));
}

/// The keys of a version's stored parts, in order.
pub(crate) struct PartKeys(Option<Vec<(u32, Uuid)>>);

impl PartKeys {
    pub(crate) fn of(meta: &ObjectMeta) -> Result<Self> {
        let Some(v) = meta.headers.get(PART_KEYS) else {
            return Ok(PartKeys(None));
        };
        let bad = || Error::Corrupt("the object's part key record is unreadable".into());
        let ids = v
            .split(',')
            .map(|e| {
                let (n, id) = e.split_once(':').ok_or_else(bad)?;
                Ok((
                    n.parse::<u32>().map_err(|_| bad())?,
                    Uuid::parse_str(id).map_err(|_| bad())?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        if ids.len() != meta.parts.len() {
            return Err(bad());
        }
        Ok(PartKeys(Some(ids)))
    }

    /// The key of stored part `index` (0-based) numbered `number`.
    pub(crate) fn key(&self, object_key: &ObjectKey, index: usize, number: u32) -> PartKey {
        match &self.0 {
            Some(ids) => {
                let (n, id) = ids[index];
                object_key.upload_part_key(n, id.as_bytes())
            }
            None => object_key.part_key(number),
        }
    }
}

/// Whether a version's data is encrypted.
pub(crate) fn is_encrypted(meta: &ObjectMeta) -> bool {
    meta.headers.contains_key(FORMAT)
}

/// The version's reserved entries only (what a metadata rewrite must keep).
pub(crate) fn reserved(headers: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    headers
        .iter()
        .filter(|(k, _)| k.starts_with(PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A version's headers split into those of the object and its encryption record (prefix
/// removed, the format entry included as `format`).
pub(crate) fn split(
    headers: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut plain = BTreeMap::new();
    let mut rec = BTreeMap::new();
    for (k, v) in headers {
        match k.strip_prefix(PREFIX) {
            // The object layer's own, possibly long (one entry per part).
            Some(_) if k == PART_KEYS || k == ETAG_KIND => {}
            Some(name) => {
                rec.insert(name.to_string(), v.clone());
            }
            None => {
                plain.insert(k.clone(), v.clone());
            }
        }
    }
    (plain, rec)
}

/// The plaintext size of a stored part.
pub(crate) fn part_plain_size(stored: u64) -> Result<u64> {
    decrypted_size(stored).map_err(|e| Error::Corrupt(format!("encrypted part: {e}")))
}

/// The plaintext size of an encrypted version (0 if its sizes are not those of sealed parts:
/// reading it then fails with `Corrupt`).
pub(crate) fn plain_size(meta: &ObjectMeta) -> u64 {
    meta.parts
        .iter()
        .map(|p| part_plain_size(p.size).unwrap_or(0))
        .sum()
}

/// Checks the version's format is one this build opens.
pub(crate) fn check_format(meta: &ObjectMeta) -> Result<()> {
    match meta.headers.get(FORMAT) {
        Some(f) if f == quarry_crypt::ALGORITHM => Ok(()),
        Some(f) => Err(Error::Corrupt(format!(
            "the object is encrypted in format {f:?}, which this build does not read"
        ))),
        None => Err(Error::Internal("the object is not encrypted".into())),
    }
}

/// The ETag of an encrypted object that must not reveal its plaintext's MD5: derived from it
/// with the object's key.
pub(crate) fn keyed_etag(key: &ObjectKey, md5: &[u8; 16]) -> String {
    hex::encode(key.derive16(b"quarry/etag/v1", md5))
}

/// Opens a stream of stored bytes with `decryptors`, one per part in order, each taking
/// exactly its range's stored bytes. An authentication failure or a short stream ends it with
/// `Corrupt`.
pub(crate) fn decrypt_stream(stored: ObjectStream, decryptors: Vec<Decryptor>) -> ObjectStream {
    struct State {
        stored: ObjectStream,
        decs: VecDeque<(Decryptor, u64)>,
        done: bool,
    }
    let decs = decryptors
        .into_iter()
        .map(|d| {
            let n = d.stored_remaining();
            (d, n)
        })
        .collect();
    let state = State {
        stored,
        decs,
        done: false,
    };
    Box::pin(futures::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        loop {
            match st.stored.next().await {
                Some(Ok(chunk)) => {
                    let mut out = BytesMut::with_capacity(chunk.len());
                    let mut data = &chunk[..];
                    while !data.is_empty() {
                        let Some((dec, left)) = st.decs.front_mut() else {
                            st.done = true;
                            return Some((
                                Err(Error::Corrupt("more encrypted bytes than expected".into())),
                                st,
                            ));
                        };
                        let take = (*left).min(data.len() as u64) as usize;
                        if let Err(e) = dec.push(&data[..take], &mut out) {
                            st.done = true;
                            return Some((Err(Error::Corrupt(e.to_string())), st));
                        }
                        *left -= take as u64;
                        data = &data[take..];
                        if *left == 0 {
                            let (dec, _) = st.decs.pop_front().expect("front exists");
                            if let Err(e) = dec.finish() {
                                st.done = true;
                                return Some((Err(Error::Corrupt(e.to_string())), st));
                            }
                        }
                    }
                    if !out.is_empty() {
                        return Some((Ok(out.freeze()), st));
                    }
                }
                Some(Err(e)) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
                None => {
                    st.done = true;
                    // Parts whose range holds no stored bytes (none) or that were cut short.
                    while let Some((dec, _)) = st.decs.pop_front() {
                        if let Err(e) = dec.finish() {
                            return Some((Err(Error::Corrupt(e.to_string())), st));
                        }
                    }
                    return None;
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_whole_packages() {
        assert_eq!(plain_block(1 << 20), 1 << 20);
        assert_eq!(stored_block(1 << 20), 16 * SEALED_PACKAGE_SIZE);
        assert_eq!(plain_block(1000), PACKAGE_SIZE);
        assert_eq!(stored_block(1000), SEALED_PACKAGE_SIZE);
    }

    #[test]
    fn the_record_round_trips_and_replaces_an_old_one() {
        let mut h = BTreeMap::new();
        h.insert("content-type".to_string(), "text/plain".to_string());
        h.insert(format!("{PREFIX}stale"), "x".to_string());
        let enc = Encryption {
            key: ObjectKey::random().unwrap(),
            record: [("kind".to_string(), "SSE-S3".to_string())].into(),
            etag_is_md5: true,
        };
        record(&mut h, &enc);
        let (plain, rec) = split(&h);
        assert_eq!(plain.len(), 1);
        assert_eq!(rec.get("kind").map(String::as_str), Some("SSE-S3"));
        assert_eq!(
            rec.get("format").map(String::as_str),
            Some(quarry_crypt::ALGORITHM)
        );
        assert!(!rec.contains_key("stale"));
        assert_eq!(reserved(&h).len(), 2);
    }
}
