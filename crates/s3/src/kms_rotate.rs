//! Master-key rotation (`POST /quarry/admin/v1/kms/rotate`): re-seals the object keys sealed
//! under one master key of the key service under another, without touching any data.
//!
//! Every version of every object of the buckets walked (and every upload in progress, whose
//! headers hold its object key) is looked at; an SSE-S3 or SSE-KMS one whose sealed key names
//! the old master key gets its object key re-sealed under the new one ([`quarry_crypt::Kms::reseal`],
//! bound to the same bucket, key and SSE-KMS context), and only its reserved
//! `x-quarry-internal-sse-*` entries are rewritten: in place, under the object's (or the
//! upload's) lock, on a write quorum, with an update stamp, as tags are changed. The object
//! key, hence every package of the data, stays as it was: shard files are not read or written.
//! SSE-C objects are never touched (their key is the customer's). An SSE-KMS object's recorded
//! key id (`x-amz-server-side-encryption-aws-kms-key-id`) becomes the new key's name.
//!
//! The walk goes on past a failure (each is counted, with its reason), and a second run after
//! a partial one re-seals what is left: what is already under the new key is skipped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use quarry_crypt::{Kms, SealedKey};
use quarry_object::{
    Error as ObjectError, HeadersUpdate, ListUploadsOptions, ListVersionsOptions, ObjectLayer,
    UploadHeadersUpdate, SSE_RECORD_PREFIX,
};
use serde::Serialize;

use crate::sse::{binding, CONTEXT, KEY_ID, KIND, SEALED, SSE_C};

/// At most this many failures are listed (all are counted).
const MAX_LISTED: usize = 1000;
/// Versions or uploads per listing page.
const PAGE: usize = 1000;

/// Why a version or upload was left as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Stored in clear.
    Plain,
    /// SSE-C: sealed under the customer's key, which the server does not hold.
    CustomerKey,
    /// Sealed under another master key (already rotated, or never under the old one).
    OtherKey,
}

/// What re-sealing one record did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Resealed,
    Skipped(Skip),
}

fn entry(name: &str) -> String {
    format!("{SSE_RECORD_PREFIX}{name}")
}

/// The sealed key of the record in the stored headers `h` when it is sealed under master key
/// `from` (to be re-sealed), else why it is left as it is. No key is opened: the listing's
/// record is sorted with this before anything is locked.
fn sealed_under(
    from: &str,
    h: &BTreeMap<String, String>,
) -> Result<Result<SealedKey, Skip>, String> {
    let kind = h.get(&entry(KIND));
    let Some(sealed) = h.get(&entry(SEALED)) else {
        return match kind {
            None => Ok(Err(Skip::Plain)),
            Some(_) => Err("the encryption record has no sealed key".into()),
        };
    };
    if kind.map(String::as_str) == Some(SSE_C) {
        return Ok(Err(Skip::CustomerKey));
    }
    let sealed = SealedKey::decode(sealed).map_err(|e| e.to_string())?;
    if sealed.key_id != from {
        return Ok(Err(Skip::OtherKey));
    }
    Ok(Ok(sealed))
}

/// Re-seals the object key recorded in the stored headers `h` of `bucket`/`key` from master
/// key `from` to `to`, changing only the reserved entries of the record; the error is the
/// reason (it names keys, never key bytes).
pub(crate) fn reseal_headers(
    kms: &dyn Kms,
    from: &str,
    to: &str,
    bucket: &str,
    key: &str,
    h: &mut BTreeMap<String, String>,
) -> Result<Outcome, String> {
    let sealed = match sealed_under(from, h)? {
        Ok(sealed) => sealed,
        Err(why) => return Ok(Outcome::Skipped(why)),
    };
    let context = binding(bucket, key, h.get(&entry(CONTEXT)).map(String::as_str));
    let resealed = kms
        .reseal(&sealed, &context, to)
        .map_err(|e| e.to_string())?;
    h.insert(entry(SEALED), resealed.encode());
    if let Some(id) = h.get_mut(&entry(KEY_ID)) {
        *id = to.to_string();
    }
    Ok(Outcome::Resealed)
}

/// The answer to a rotation.
#[derive(Debug, Default, Serialize)]
pub struct RotateReport {
    pub from: String,
    pub to: String,
    pub buckets: u64,
    /// Versions (delete markers aside) and uploads in progress looked at.
    pub scanned: u64,
    pub resealed: u64,
    pub skipped: u64,
    pub skipped_reasons: SkippedJson,
    pub failed: u64,
    /// More failures than are listed.
    pub truncated: bool,
    pub failures: Vec<RotateFailure>,
}

#[derive(Debug, Default, Serialize)]
pub struct SkippedJson {
    /// Stored in clear.
    pub not_encrypted: u64,
    /// SSE-C (the customer's key; never re-sealed).
    pub sse_c: u64,
    /// Sealed under another master key.
    pub other_key: u64,
}

#[derive(Debug, Serialize)]
pub struct RotateFailure {
    pub bucket: String,
    /// Empty when the bucket's listing failed.
    pub key: String,
    pub version_id: Option<String>,
    pub upload_id: Option<String>,
    pub reason: String,
}

impl RotateReport {
    fn skip(&mut self, why: Skip) {
        self.skipped += 1;
        match why {
            Skip::Plain => self.skipped_reasons.not_encrypted += 1,
            Skip::CustomerKey => self.skipped_reasons.sse_c += 1,
            Skip::OtherKey => self.skipped_reasons.other_key += 1,
        }
    }

    /// Counts one update: written, refused by its closure (skipped, or failed with the reason
    /// it left in the slot), gone meanwhile (`gone`: not counted), or failed.
    fn tally(
        &mut self,
        result: quarry_object::Result<()>,
        outcome: Option<Result<Outcome, String>>,
        gone: impl Fn(&ObjectError) -> bool,
        failure: impl FnOnce(String) -> RotateFailure,
    ) {
        match (result, outcome) {
            (Ok(()), _) => self.resealed += 1,
            (Err(_), Some(Ok(Outcome::Skipped(why)))) => self.skip(why),
            (Err(_), Some(Err(reason))) => self.fail(failure(reason)),
            (Err(e), None) if gone(&e) => {}
            (Err(e), _) => self.fail(failure(e.to_string())),
        }
    }

    fn fail(&mut self, f: RotateFailure) {
        self.failed += 1;
        if self.failures.len() < MAX_LISTED {
            self.failures.push(f);
        } else {
            self.truncated = true;
        }
    }
}

/// The outcome an update's closure leaves for the walk (the closure itself can only refuse).
type Slot = Arc<Mutex<Option<Result<Outcome, String>>>>;

fn take(slot: &Slot) -> Option<Result<Outcome, String>> {
    slot.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// The closure's answer for an outcome: only a re-seal is written.
fn answer(slot: &Slot, r: Result<Outcome, String>) -> quarry_object::Result<()> {
    let write = matches!(r, Ok(Outcome::Resealed));
    let err = r.as_ref().err().cloned();
    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    match (write, err) {
        (true, _) => Ok(()),
        (false, Some(reason)) => Err(ObjectError::Internal(reason)),
        // Nothing to change: refuse, so nothing is written.
        (false, None) => Err(ObjectError::PreconditionFailed),
    }
}

/// Rotates every version and upload of `bucket` (every bucket: `None`) under `prefix` from
/// master key `from` to `to`. The keys must both exist (checked by the caller).
pub(crate) async fn rotate(
    layer: Arc<dyn ObjectLayer>,
    kms: Arc<dyn Kms>,
    from: String,
    to: String,
    bucket: Option<String>,
    prefix: String,
) -> quarry_object::Result<RotateReport> {
    let buckets = match bucket {
        Some(b) => vec![b],
        None => layer
            .list_buckets()
            .await?
            .into_iter()
            .map(|b| b.name)
            .collect(),
    };
    let single = buckets.len() == 1;
    let mut report = RotateReport {
        from: from.clone(),
        to: to.clone(),
        ..Default::default()
    };
    for b in buckets {
        report.buckets += 1;
        let walked = rotate_bucket(&*layer, &kms, &from, &to, &b, &prefix, &mut report).await;
        if let Err(e) = walked {
            // A bucket named by the caller that cannot be listed is the call's error.
            if single {
                return Err(e);
            }
            report.fail(RotateFailure {
                bucket: b.clone(),
                key: String::new(),
                version_id: None,
                upload_id: None,
                reason: e.to_string(),
            });
        }
    }
    tracing::info!(
        from,
        to,
        buckets = report.buckets,
        scanned = report.scanned,
        resealed = report.resealed,
        skipped = report.skipped,
        failed = report.failed,
        "master-key rotation done"
    );
    Ok(report)
}

async fn rotate_bucket(
    layer: &dyn ObjectLayer,
    kms: &Arc<dyn Kms>,
    from: &str,
    to: &str,
    bucket: &str,
    prefix: &str,
    report: &mut RotateReport,
) -> quarry_object::Result<()> {
    // Every version, page by page.
    let mut key_marker = None;
    let mut version_id_marker = None;
    loop {
        let page = layer
            .list_object_versions(
                bucket,
                ListVersionsOptions {
                    prefix: prefix.to_string(),
                    delimiter: None,
                    key_marker: key_marker.take(),
                    version_id_marker: version_id_marker.take(),
                    max_keys: PAGE,
                },
            )
            .await?;
        for v in page.versions.iter().filter(|v| !v.delete_marker) {
            report.scanned += 1;
            // From the listing first, without opening any key: only a version that looks
            // sealed under `from` is locked and read again (the closure decides on what it
            // finds under the lock).
            let listed: BTreeMap<String, String> = v
                .encryption
                .iter()
                .map(|(k, val)| (entry(k), val.clone()))
                .collect();
            if let Ok(Err(why)) = sealed_under(from, &listed) {
                report.skip(why);
                continue;
            }
            let slot: Slot = Arc::default();
            let update: HeadersUpdate = {
                let (kms, slot) = (kms.clone(), slot.clone());
                let (from, to) = (from.to_string(), to.to_string());
                Arc::new(move |info, headers| {
                    let r = reseal_headers(&*kms, &from, &to, &info.bucket, &info.key, headers);
                    answer(&slot, r)
                })
            };
            let version = v.version_id;
            let result = layer
                .update_object_headers(bucket, &v.key, Some(version), update)
                .await;
            let failure = |reason: String| RotateFailure {
                bucket: bucket.to_string(),
                key: v.key.clone(),
                version_id: Some(version.to_string()),
                upload_id: None,
                reason,
            };
            // Deleted meanwhile: nothing left to re-seal.
            let gone = |e: &ObjectError| {
                matches!(e, ObjectError::NoSuchVersion | ObjectError::ObjectNotFound)
            };
            report.tally(result.map(|_| ()), take(&slot), gone, failure);
        }
        if !page.is_truncated {
            break;
        }
        key_marker = page.next_key_marker;
        version_id_marker = page.next_version_id_marker;
        if key_marker.is_none() {
            break;
        }
    }

    // Uploads in progress: their headers hold the object key their parts are sealed with.
    let mut key_marker = None;
    let mut upload_id_marker = None;
    loop {
        let page = layer
            .list_multipart_uploads(
                bucket,
                ListUploadsOptions {
                    prefix: prefix.to_string(),
                    delimiter: None,
                    key_marker: key_marker.take(),
                    upload_id_marker: upload_id_marker.take(),
                    max_uploads: PAGE,
                },
            )
            .await?;
        for u in &page.uploads {
            report.scanned += 1;
            let slot: Slot = Arc::default();
            let update: UploadHeadersUpdate = {
                let (kms, slot) = (kms.clone(), slot.clone());
                let (from, to) = (from.to_string(), to.to_string());
                let (b, k) = (bucket.to_string(), u.key.clone());
                Arc::new(move |headers| {
                    answer(&slot, reseal_headers(&*kms, &from, &to, &b, &k, headers))
                })
            };
            let result = layer
                .update_upload_headers(bucket, &u.key, &u.upload_id, update)
                .await;
            let failure = |reason: String| RotateFailure {
                bucket: bucket.to_string(),
                key: u.key.clone(),
                version_id: None,
                upload_id: Some(u.upload_id.clone()),
                reason,
            };
            // Completed or aborted meanwhile.
            let gone = |e: &ObjectError| matches!(e, ObjectError::NoSuchUpload);
            report.tally(result, take(&slot), gone, failure);
        }
        if !page.is_truncated {
            break;
        }
        key_marker = page.next_key_marker;
        upload_id_marker = page.next_upload_id_marker;
        if key_marker.is_none() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use quarry_crypt::LocalKms;

    fn kms(names: &[(&str, u8)]) -> LocalKms {
        let text: Vec<String> = names
            .iter()
            .map(|(n, b)| {
                format!(
                    "{n}:{}",
                    base64::engine::general_purpose::STANDARD.encode([*b; 32])
                )
            })
            .collect();
        LocalKms::parse(&text.join(","), None).unwrap()
    }

    fn record(
        kms: &LocalKms,
        kind: &str,
        key_id: &str,
        ctx: Option<&str>,
    ) -> BTreeMap<String, String> {
        let (_, sealed) = kms.generate(key_id, &binding("b", "k", ctx)).unwrap();
        let mut h = BTreeMap::new();
        h.insert("content-type".into(), "text/plain".into());
        h.insert(entry(KIND), kind.into());
        h.insert(entry(SEALED), sealed.encode());
        h.insert(entry("format"), "whatever".into());
        if kind == "aws:kms" {
            h.insert(entry(KEY_ID), key_id.into());
        }
        if let Some(c) = ctx {
            h.insert(entry(CONTEXT), c.into());
        }
        h
    }

    #[test]
    fn reseals_under_the_new_key_and_changes_only_the_record() {
        let both = kms(&[("a", 1), ("b", 2)]);
        let only_b = kms(&[("b", 2)]);
        for (kind, ctx) in [("AES256", None), ("aws:kms", Some("e30="))] {
            let mut h = record(&both, kind, "a", ctx);
            let before_key = both
                .unseal(
                    &SealedKey::decode(&h[&entry(SEALED)]).unwrap(),
                    &binding("b", "k", ctx),
                )
                .unwrap()
                .derive16(b"t", b"x");
            let untouched: Vec<_> = h
                .iter()
                .filter(|(k, _)| *k != &entry(SEALED) && *k != &entry(KEY_ID))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(
                reseal_headers(&both, "a", "b", "b", "k", &mut h),
                Ok(Outcome::Resealed)
            );
            let sealed = SealedKey::decode(&h[&entry(SEALED)]).unwrap();
            assert_eq!(sealed.key_id, "b");
            // The same object key, now opened with only the new master key.
            let after = only_b.unseal(&sealed, &binding("b", "k", ctx)).unwrap();
            assert_eq!(after.derive16(b"t", b"x"), before_key);
            for (k, v) in untouched {
                assert_eq!(h.get(&k), Some(&v), "{k}");
            }
            if kind == "aws:kms" {
                assert_eq!(h[&entry(KEY_ID)], "b");
            }
            // A second run finds nothing more to do.
            assert_eq!(
                reseal_headers(&both, "a", "b", "b", "k", &mut h),
                Ok(Outcome::Skipped(Skip::OtherKey))
            );
        }
    }

    #[test]
    fn skips_plain_sse_c_and_other_keys_and_reports_failures() {
        let both = kms(&[("a", 1), ("b", 2)]);
        let mut plain: BTreeMap<String, String> = [("etag".to_string(), "x".to_string())].into();
        assert_eq!(
            reseal_headers(&both, "a", "b", "b", "k", &mut plain),
            Ok(Outcome::Skipped(Skip::Plain))
        );
        let mut c = record(&both, "SSE-C", "a", None);
        let c_before = c.clone();
        assert_eq!(
            reseal_headers(&both, "a", "b", "b", "k", &mut c),
            Ok(Outcome::Skipped(Skip::CustomerKey))
        );
        assert_eq!(c, c_before);
        let mut other = record(&both, "AES256", "b", None);
        assert_eq!(
            reseal_headers(&both, "a", "b", "b", "k", &mut other),
            Ok(Outcome::Skipped(Skip::OtherKey))
        );
        // Bound to another object: the old envelope does not open; nothing changes.
        let mut moved = record(&both, "AES256", "a", None);
        let before = moved.clone();
        assert!(reseal_headers(&both, "a", "b", "b", "other", &mut moved).is_err());
        assert_eq!(moved, before);
        let mut broken = record(&both, "AES256", "a", None);
        broken.insert(entry(SEALED), "!!".into());
        assert!(reseal_headers(&both, "a", "b", "b", "k", &mut broken).is_err());
    }
}
