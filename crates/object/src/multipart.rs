//! Multipart uploads on an erasure set.
//!
//! An upload lives on every drive of the object's set under `.quarry.sys/multipart` (see
//! [`quarry_disk::multipart`]). Each part is erasure coded as it streams in, with the same
//! [`BlockReader`] and [`ShardSink`] as a PUT, into a tmp data dir that the drive then moves into
//! the upload. Complete stages the chosen parts as `part.1..part.K` of a fresh data dir and
//! commits it with `rename_data` under the object's lock, exactly like a PUT; the object then
//! reads like any multi-part object (see `get.rs`).
//!
//! Quorum as for objects: creating an upload and committing a part need a write quorum of the
//! set's drives; reading an upload or its parts needs a read quorum that agrees.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use md5::{Digest, Md5};
use quarry_disk::{
    Drive, DriveError, ErasureInfo, ObjectMeta, PartInfo, PartMeta, UploadMeta, META_VERSION,
    UPLOAD_META_VERSION,
};
use quarry_erasure::Erasure;
use tracing::{debug, info, warn};

use crate::api::{
    ByteStream, CompleteOptions, CompletePart, GetObjectReader, HttpRange, ListPartsOptions,
    ListPartsResult, ListUploadsOptions, ListUploadsResult, NewUploadOptions, ObjectInfo,
    PartOptions, UploadInfo, UploadedPart, MAX_PARTS, MAX_PART_SIZE, MIN_PART_SIZE,
};
use crate::error::{Error, Result};
use crate::put::{erasure_info, BodyBounds, ShardOutcome, ShardSink, Streamed, TmpGuard};
use crate::quorum::{count_full, count_ok, on_all, read_quorum, write_failed, write_quorum};
use crate::set::{object_info, ErasureSet};

/// The stored-header entry that names the upload an object was completed from, so a retried
/// complete of that upload can be answered. Internal: never sent as a response header (only the
/// standard headers are), and dropped when the object is copied.
pub(crate) const COMPLETED_UPLOAD: &str = "x-quarry-completed-upload";

fn upload_info(u: &UploadMeta) -> UploadInfo {
    UploadInfo {
        bucket: u.bucket.clone(),
        key: u.key.clone(),
        upload_id: u.upload_id.clone(),
        initiated_ns: u.initiated_ns,
        checksum_algorithm: u.checksum_algorithm.clone(),
    }
}

/// The plaintext size of a part as the client sent it (an encrypted upload stores more).
fn part_plain_size(p: &PartMeta, u: &UploadMeta) -> Result<u64> {
    if crate::sse::headers_encrypted(&u.headers) {
        crate::sse::part_plain_size(p.size)
    } else {
        Ok(p.size)
    }
}

fn uploaded_part(p: &PartMeta, u: &UploadMeta) -> UploadedPart {
    UploadedPart {
        number: p.number,
        size: part_plain_size(p, u).unwrap_or(0),
        etag: p.etag.clone(),
        checksum: p.checksum.clone(),
        checksum_algorithm: u.checksum_algorithm.clone(),
        mod_time_ns: p.mod_time_ns,
    }
}

/// Two drives' copies describe the same upload when these agree (`index` differs by design).
fn same_upload(a: &UploadMeta, b: &UploadMeta) -> bool {
    a.initiated_ns == b.initiated_ns
        && a.bucket == b.bucket
        && a.key == b.key
        && a.checksum_algorithm == b.checksum_algorithm
        && a.erasure.codec == b.erasure.codec
        && a.erasure.bitrot == b.erasure.bitrot
        && a.erasure.data == b.erasure.data
        && a.erasure.parity == b.erasure.parity
        && a.erasure.block_size == b.erasure.block_size
        && a.erasure.distribution == b.erasure.distribution
}

/// Two drives' copies describe the same upload of one part when these agree.
fn same_part(a: &PartMeta, b: &PartMeta) -> bool {
    a.number == b.number
        && a.data_dir == b.data_dir
        && a.size == b.size
        && a.etag == b.etag
        && a.checksum == b.checksum
}

pub(crate) fn upload_erasure(u: &UploadMeta) -> Result<Erasure> {
    let e = &u.erasure;
    Erasure::with_names(
        &e.codec,
        &e.bitrot,
        e.data as usize,
        e.parity as usize,
        e.block_size as usize,
    )
    .map_err(|err| Error::Corrupt(format!("upload metadata names an unusable code: {err}")))
}

/// An ETag as a client may send it (`"abc"`, `abc`), normalized for comparison.
fn normalize_etag(etag: &str) -> String {
    etag.trim().trim_matches('"').to_ascii_lowercase()
}

/// The parts of an upload a read quorum agrees on, each with the drives that hold it.
pub(crate) struct PartsQuorum {
    pub upload: UploadMeta,
    /// Drive i's copy of the upload metadata, when it agrees.
    pub uploads: Vec<Option<UploadMeta>>,
    /// Ascending part numbers; `holders[i]` says whether drive i holds that version of the part.
    pub parts: Vec<(PartMeta, Vec<bool>)>,
}

impl ErasureSet {
    /// Name of the lock of one part of an upload (object keys have no NUL: no collision with a key).
    pub(crate) fn part_lock(bucket: &str, key: &str, upload_id: &str, part: u32) -> String {
        format!("{bucket}/{key}\0upload\0{upload_id}\0{part}")
    }

    pub(crate) fn upload_lock(bucket: &str, key: &str, upload_id: &str) -> String {
        format!("{bucket}/{key}\0upload\0{upload_id}")
    }

    /// Reads an upload's metadata from every drive and picks the copy a read quorum agrees on.
    pub(crate) async fn upload_quorum(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(UploadMeta, Vec<Option<UploadMeta>>)> {
        let answers = on_all(&self.drives, |d| {
            let (b, k, u) = (bucket.to_string(), key.to_string(), upload_id.to_string());
            async move { d.read_upload(&b, &k, &u).await }
        })
        .await;
        let mut groups: Vec<(&UploadMeta, usize)> = Vec::new();
        for m in answers.iter().filter_map(|a| a.as_ref().ok()) {
            match groups.iter_mut().find(|(rep, _)| same_upload(rep, m)) {
                Some(g) => g.1 += 1,
                None => groups.push((m, 1)),
            }
        }
        let best = groups
            .iter()
            .filter(|(m, n)| *n >= read_quorum(m.erasure.data as usize, m.erasure.parity as usize))
            .max_by_key(|(m, n)| (*n, m.initiated_ns));
        if let Some((rep, _)) = best {
            // Among the copies that agree, the newest in-place change of the headers (see
            // `update_upload_headers`): made on a write quorum, it is in every read quorum.
            let meta = answers
                .iter()
                .filter_map(|a| a.as_ref().ok())
                .filter(|m| same_upload(m, rep))
                .max_by_key(|m| crate::api::meta_updated_ns(&m.headers))
                .unwrap_or(rep)
                .clone();
            let metas = answers
                .iter()
                .map(|a| match a {
                    Ok(m) if same_upload(m, &meta) => Some(m.clone()),
                    _ => None,
                })
                .collect();
            return Ok((meta, metas));
        }
        let absent = answers
            .iter()
            .filter(|a| {
                matches!(
                    a,
                    Err(DriveError::FileNotFound
                        | DriveError::InvalidName(_)
                        | DriveError::VolumeNotFound)
                )
            })
            .count();
        // Absent on so many drives that no write quorum can hold it (else its holders may only
        // have failed to answer: unknown, not absent).
        if absent + self.set_write_quorum() > answers.len() {
            self.require_bucket(bucket).await?;
            return Err(Error::NoSuchUpload);
        }
        Err(Error::ReadQuorum {
            have: groups.iter().map(|g| g.1).max().unwrap_or(0),
            need: self.set_read_quorum(),
        })
    }

    /// The parts of an upload, as a read quorum of drives agrees on them.
    pub(crate) async fn parts_quorum(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<PartsQuorum> {
        let (upload, uploads) = self.upload_quorum(bucket, key, upload_id).await?;
        let answers = on_all(&self.drives, |d| {
            let (b, k, u) = (bucket.to_string(), key.to_string(), upload_id.to_string());
            async move { d.list_parts(&b, &k, &u).await }
        })
        .await;
        let rq = read_quorum(upload.erasure.data as usize, upload.erasure.parity as usize);
        let answered = answers
            .iter()
            .zip(&uploads)
            .filter(|(a, u)| a.is_ok() && u.is_some())
            .count();
        if answered < rq {
            if answers
                .iter()
                .filter(|a| matches!(a, Err(DriveError::FileNotFound)))
                .count()
                > self.drives.len() - rq
            {
                return Err(Error::NoSuchUpload);
            }
            return Err(Error::ReadQuorum {
                have: answered,
                need: rq,
            });
        }
        let n = self.drives.len();
        let mut candidates: BTreeMap<u32, Vec<(PartMeta, Vec<bool>)>> = BTreeMap::new();
        for (i, a) in answers.into_iter().enumerate() {
            if uploads[i].is_none() {
                continue;
            }
            let Ok(parts) = a else { continue };
            for p in parts {
                let c = candidates.entry(p.number).or_default();
                match c.iter_mut().find(|(rep, _)| same_part(rep, &p)) {
                    Some((_, holders)) => holders[i] = true,
                    None => {
                        let mut holders = vec![false; n];
                        holders[i] = true;
                        c.push((p, holders));
                    }
                }
            }
        }
        let parts = candidates
            .into_values()
            .filter_map(|c| {
                c.into_iter()
                    .filter(|(_, h)| h.iter().filter(|x| **x).count() >= rq)
                    .max_by_key(|(p, h)| (p.mod_time_ns, h.iter().filter(|x| **x).count()))
            })
            .collect();
        Ok(PartsQuorum {
            upload,
            uploads,
            parts,
        })
    }

    /// CreateMultipartUpload: records the upload on every drive; returns its id.
    pub async fn new_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        opts: NewUploadOptions,
    ) -> Result<UploadInfo> {
        self.require_bucket(bucket).await?;
        let mut opts = opts;
        let erasure = match &opts.encryption {
            None => self.new_erasure()?,
            Some(e) => {
                crate::sse::record_upload(&mut opts.headers, e);
                self.new_erasure_with_block(crate::sse::stored_block(self.cfg.block_size))?
            }
        };
        let distribution = self.distribution(bucket, key);
        let base = UploadMeta {
            version: UPLOAD_META_VERSION,
            bucket: bucket.to_string(),
            key: key.to_string(),
            upload_id: self.new_id().hyphenated().to_string(),
            initiated_ns: self.now_ns(),
            headers: opts.headers,
            user_meta: opts.user_meta,
            checksum_algorithm: opts.checksum_algorithm,
            erasure: erasure_info(&erasure, &distribution),
        };
        let answers = join_all(self.drives.iter().enumerate().map(|(pos, d)| {
            let mut m = base.clone();
            m.erasure.index = distribution[pos];
            async move { d.create_upload(&m).await }
        }))
        .await;
        let ok = count_ok(&answers);
        let wq = self.set_write_quorum();
        if ok < wq {
            let _ = self
                .delete_upload_everywhere(bucket, key, &base.upload_id)
                .await;
            if answers
                .iter()
                .any(|a| matches!(a, Err(DriveError::VolumeNotFound)))
                && ok == 0
            {
                return Err(Error::BucketNotFound);
            }
            return Err(write_failed(ok, wq, count_full(&answers)));
        }
        Ok(upload_info(&base))
    }

    /// UploadPart: streams `body` into part `number` of the upload, erasure coded block by
    /// block, and commits it on a write quorum (replacing an earlier upload of that number).
    #[allow(clippy::too_many_arguments)]
    pub async fn put_object_part(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        upload_id: &str,
        number: u32,
        body: ByteStream,
        opts: PartOptions,
    ) -> Result<UploadedPart> {
        if !(1..=MAX_PARTS).contains(&number) {
            return Err(Error::InvalidPartNumber {
                part: number,
                parts: MAX_PARTS as usize,
            });
        }
        let (upload, uploads) = self.upload_quorum(bucket, key, upload_id).await?;
        let erasure = upload_erasure(&upload)?;
        let wq = write_quorum(erasure.data_shards(), erasure.parity_shards());
        let tmp_id = self.new_id();
        let data_dir = self.new_id();
        // The request's keys are checked against the upload before any byte is read; an
        // encrypted upload's part is sealed under a key of its own (number and data dir).
        let encrypted = crate::sse::headers_encrypted(&upload.headers);
        let object_key = match &opts.key {
            Some(opener) => {
                let (_, record) = crate::sse::split(&upload.headers);
                let info = ObjectInfo {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    encryption: if encrypted { record } else { BTreeMap::new() },
                    ..Default::default()
                };
                (opener.0)(&info)?
            }
            None => None,
        };
        let part_key = match (encrypted, &object_key) {
            (false, _) => None,
            (true, None) => return Err(Error::KeyRequired),
            (true, Some(k)) => Some(k.upload_part_key(number, data_dir.as_bytes())),
        };
        let mut tmp_guard = TmpGuard::new(self.drives.clone(), tmp_id);
        // Drives without the upload get no shard: they could not commit it.
        let drives: Vec<Arc<dyn Drive>> = self.drives.clone();
        let mut sink = ShardSink::new(
            drives,
            &upload.erasure.distribution,
            crate::put::ShardFiles {
                tmp_id,
                data_dir,
                part: number,
            },
            0, // parts are never inline: they become shard files of the object
            wq,
            self.buffers.clone(),
        );
        let mut hasher = match (&upload.checksum_algorithm, &opts.hashers) {
            (None, _) => None,
            (Some(alg), Some(h)) => Some((h.0)(alg).ok_or_else(|| {
                Error::Internal(format!(
                    "no hasher for the upload's checksum algorithm {alg}"
                ))
            })?),
            (Some(alg), None) => {
                return Err(Error::Internal(format!(
                    "the upload needs {alg} checksums and none can be computed"
                )))
            }
        };
        let limit = opts.size.unwrap_or(MAX_PART_SIZE).min(MAX_PART_SIZE);
        let Streamed {
            size,
            stored,
            md5: digest,
        } = sink
            .stream(
                &erasure,
                body,
                BodyBounds {
                    limit: Some(limit),
                    declared: opts.size,
                    content_md5: opts.content_md5,
                },
                |block| {
                    if let Some(h) = hasher.as_mut() {
                        h.update(block);
                    }
                },
                part_key.as_ref(),
            )
            .await?;
        let checksum = hasher.map(|h| h.finish());
        let outcomes = sink.finish().await;
        // An empty part never left the sink's inline buffer: give it its (empty) shard files.
        // Per drive: written, or why not (`Err(true)`: the drive is full).
        let written = join_all(outcomes.into_iter().enumerate().map(|(pos, o)| {
            let d = self.drives[pos].clone();
            async move {
                match o {
                    ShardOutcome::File => Ok(()),
                    ShardOutcome::Failed { full } => Err(full),
                    ShardOutcome::Inline(b) => {
                        let r = async {
                            let mut w = d.create_shard_writer(tmp_id, data_dir, number).await?;
                            w.write(&b).await?;
                            w.finish().await
                        }
                        .await;
                        if let Err(e) = &r {
                            warn!(drive = d.endpoint(), error = %e, "cannot write an empty part");
                        }
                        r.map_err(|e| matches!(e, DriveError::DiskFull))
                    }
                }
            }
        }))
        .await;
        let (size, etag) = match &object_key {
            Some(k) if encrypted => (stored, crate::sse::part_etag(&upload.headers, k, &digest)),
            _ => (size, hex::encode(digest)),
        };
        let part = PartMeta {
            version: UPLOAD_META_VERSION,
            number,
            size,
            etag,
            checksum,
            mod_time_ns: self.now_ns(),
            data_dir,
        };
        let _guard = self
            .locks
            .lock(&Self::part_lock(bucket, key, upload_id, number))
            .await?;
        let answers = join_all(self.drives.iter().enumerate().map(|(pos, d)| {
            let written = written[pos];
            let has_upload = uploads[pos].is_some();
            let part = &part;
            async move {
                match written {
                    Ok(()) if has_upload => {
                        d.commit_part(tmp_id, bucket, key, upload_id, part).await
                    }
                    // The upload is not on this drive: an abort removing it, or a drive that
                    // lost it. It counts as gone, as a commit that finds it removed does.
                    Ok(()) => Err(DriveError::FileNotFound),
                    Err(true) => Err(DriveError::DiskFull),
                    Err(false) => Err(DriveError::Unusable("part shard not written".into())),
                }
            }
        }))
        .await;
        let ok = count_ok(&answers);
        if ok == self.drives.len() {
            tmp_guard.disarm();
        }
        if ok < wq {
            let gone = answers
                .iter()
                .filter(|a| matches!(a, Err(DriveError::FileNotFound)))
                .count();
            if gone > self.drives.len() - wq {
                return Err(Error::NoSuchUpload);
            }
            return Err(write_failed(ok, wq, count_full(&answers)));
        }
        Ok(uploaded_part(&part, &upload))
    }

    /// ListParts: one page of the upload's parts in ascending order.
    pub async fn list_object_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        opts: ListPartsOptions,
    ) -> Result<ListPartsResult> {
        let q = self.parts_quorum(bucket, key, upload_id).await?;
        let mut after = q
            .parts
            .iter()
            .filter(|(p, _)| p.number > opts.part_number_marker);
        let parts: Vec<UploadedPart> = after
            .by_ref()
            .take(opts.max_parts)
            .map(|(p, _)| uploaded_part(p, &q.upload))
            .collect();
        let is_truncated = after.next().is_some();
        Ok(ListPartsResult {
            upload: upload_info(&q.upload),
            next_part_number_marker: parts.last().map(|p| p.number),
            parts,
            is_truncated,
        })
    }

    /// CompleteMultipartUpload: checks the list, stages the chosen parts as the parts of a new
    /// data dir on every drive that holds them all, and commits it like a PUT. The upload is
    /// removed once the object is committed.
    /// Completes an upload as a new version of the object (`version_id` as in
    /// [`ErasureSet::put_object`]).
    pub async fn complete_multipart_upload(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: Vec<CompletePart>,
        opts: CompleteOptions,
        version_id: Option<uuid::Uuid>,
    ) -> Result<ObjectInfo> {
        if parts.is_empty() {
            return Err(Error::InvalidPart("no part was given".into()));
        }
        if parts.windows(2).any(|w| w[0].number >= w[1].number) {
            return Err(Error::InvalidPartOrder);
        }
        let _upload_guard = self
            .locks
            .lock(&Self::upload_lock(bucket, key, upload_id))
            .await?;
        let q = match self.parts_quorum(bucket, key, upload_id).await {
            Ok(q) => q,
            // A retried complete (its answer was lost): the upload is gone because it became the
            // object. S3 answers the retry as it answered the first.
            Err(Error::NoSuchUpload) => {
                return self.completed_already(bucket, key, upload_id, &parts).await
            }
            Err(e) => return Err(e),
        };
        let mut chosen: Vec<(&PartMeta, &Vec<bool>)> = Vec::with_capacity(parts.len());
        for (i, want) in parts.iter().enumerate() {
            let Some((p, holders)) = q.parts.iter().find(|(p, _)| p.number == want.number) else {
                return Err(Error::InvalidPart(format!(
                    "part {} has not been uploaded",
                    want.number
                )));
            };
            if normalize_etag(&want.etag) != p.etag {
                return Err(Error::InvalidPart(format!(
                    "the ETag given for part {} is not the part's ETag",
                    want.number
                )));
            }
            if let Some(sum) = &want.checksum {
                if p.checksum.as_deref() != Some(sum.as_str()) {
                    return Err(Error::InvalidPart(format!(
                        "the checksum given for part {} is not the part's checksum",
                        want.number
                    )));
                }
            }
            let plain = part_plain_size(p, &q.upload)?;
            if i + 1 < parts.len() && plain < MIN_PART_SIZE {
                return Err(Error::EntityTooSmall {
                    part: p.number,
                    size: plain,
                    min: MIN_PART_SIZE,
                });
            }
            chosen.push((p, holders));
        }

        let mut md5s = Md5::new();
        for (p, _) in &chosen {
            let raw = hex::decode(&p.etag)
                .map_err(|_| Error::Corrupt(format!("part {} has a malformed ETag", p.number)))?;
            md5s.update(&raw);
        }
        let etag = format!("{}-{}", hex::encode(md5s.finalize()), chosen.len());
        let size: u64 = chosen.iter().map(|(p, _)| p.size).sum();
        // Empty parts count in the ETag but hold no data: the object's parts are the others
        // (a shard file of an empty part would hold no block to verify or rebuild).
        let part_metas: Vec<PartMeta> = chosen
            .iter()
            .filter(|(p, _)| p.size > 0)
            .map(|(p, _)| (*p).clone())
            .collect();
        let erasure = upload_erasure(&q.upload)?;
        let wq = write_quorum(erasure.data_shards(), erasure.parity_shards());
        // The parts are linked, not copied: only metadata needs room.
        self.check_space(0).await?;
        // A part on fewer drives than a write needs cannot be committed, and retrying the
        // complete would not change that: its UploadPart failed (or drives lost it since).
        // Uploading the part again does.
        for (p, holders) in &chosen {
            let held = holders
                .iter()
                .zip(&q.uploads)
                .filter(|(h, u)| **h && u.is_some())
                .count();
            if held < wq {
                return Err(Error::InvalidPart(format!(
                    "part {} is stored on {held} drives, fewer than the {wq} a write needs; \
                     upload it again",
                    p.number
                )));
            }
        }

        let tmp_id = self.new_id();
        let data_dir = self.new_id();
        let mut tmp_guard = TmpGuard::new(self.drives.clone(), tmp_id);
        let holds_all: Vec<bool> = (0..self.drives.len())
            .map(|i| q.uploads[i].is_some() && chosen.iter().all(|(_, h)| h[i]))
            .collect();
        let staged = join_all(self.drives.iter().enumerate().map(|(i, d)| {
            let part_metas = &part_metas;
            let holds = holds_all[i];
            async move {
                if !holds {
                    return false;
                }
                match d
                    .stage_parts(bucket, key, upload_id, part_metas, tmp_id, data_dir)
                    .await
                {
                    Ok(()) => true,
                    Err(e) => {
                        warn!(drive = d.endpoint(), error = %e, "cannot stage the parts of an upload");
                        false
                    }
                }
            }
        }))
        .await;
        let base = ObjectMeta {
            version: META_VERSION,
            version_id,
            delete_marker: false,
            size,
            mod_time_ns: self.now_ns(),
            etag,
            headers: {
                let mut h = q.upload.headers.clone();
                if crate::api::retention(&h).is_none() {
                    h.extend(opts.lock_defaults.clone());
                }
                h.insert(COMPLETED_UPLOAD.to_owned(), upload_id.to_owned());
                // The upload's own change stamp is not the new version's.
                h.remove(crate::api::META_UPDATED_HEADER);
                if crate::sse::headers_encrypted(&h) {
                    let ids: Vec<(u32, uuid::Uuid)> =
                        part_metas.iter().map(|p| (p.number, p.data_dir)).collect();
                    crate::sse::record_part_keys(&mut h, &ids);
                }
                h
            },
            user_meta: q.upload.user_meta.clone(),
            checksums: opts.checksums.clone(),
            erasure: ErasureInfo {
                index: 0,
                ..q.upload.erasure.clone()
            },
            data_dir: Some(data_dir),
            parts: part_metas
                .iter()
                .enumerate()
                .map(|(i, p)| PartInfo {
                    number: i as u32 + 1,
                    size: p.size,
                    etag: p.etag.clone(),
                })
                .collect(),
            inline: None,
        };
        let metas: Vec<Option<ObjectMeta>> = staged
            .iter()
            .enumerate()
            .map(|(i, ok)| {
                ok.then(|| {
                    let mut m = base.clone();
                    m.erasure.index = q.upload.erasure.distribution[i];
                    m
                })
            })
            .collect();
        let ready = metas.iter().filter(|m| m.is_some()).count();
        if ready < wq {
            return Err(Error::WriteQuorum {
                have: ready,
                need: wq,
            });
        }
        let committed = self
            .commit(tmp_id, bucket, key, &metas, opts.precondition.as_ref())
            .await?;
        tmp_guard.disarm();
        let ok = count_ok(&committed);
        if ok < wq {
            if ok == 0
                && committed
                    .iter()
                    .any(|a| matches!(a, Err(DriveError::VolumeNotFound)))
            {
                return Err(Error::BucketNotFound);
            }
            return Err(write_failed(ok, wq, count_full(&committed)));
        }
        if let Err(e) = self.delete_upload_everywhere(bucket, key, upload_id).await {
            warn!(bucket, key, upload_id, error = %e, "completed upload not removed; it will expire");
        }
        if ok < self.drives.len() {
            self.queue_heal(bucket, key);
        }
        Ok(object_info(bucket, key, &base))
    }

    /// The answer to a complete of an upload that no longer exists: the current object, if this
    /// upload made it from exactly these parts (its ETag is a function of theirs), else
    /// `NoSuchUpload`.
    async fn completed_already(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[CompletePart],
    ) -> Result<ObjectInfo> {
        let meta = match self.read_meta_quorum(bucket, key).await {
            Ok((meta, _, _)) => meta,
            Err(Error::ObjectNotFound) => return Err(Error::NoSuchUpload),
            Err(e) => return Err(e),
        };
        let mut md5s = Md5::new();
        for p in parts {
            match hex::decode(normalize_etag(&p.etag)) {
                Ok(raw) => md5s.update(&raw),
                Err(_) => return Err(Error::NoSuchUpload),
            }
        }
        let etag = format!("{}-{}", hex::encode(md5s.finalize()), parts.len());
        if meta.headers.get(COMPLETED_UPLOAD).map(String::as_str) == Some(upload_id)
            && meta.etag == etag
        {
            Ok(object_info(bucket, key, &meta))
        } else {
            Err(Error::NoSuchUpload)
        }
    }

    /// Removes an upload from every drive; `FileNotFound` on all of them is `NoSuchUpload`. Done
    /// once it is gone from a write quorum (else a read quorum may still hold it, and the upload
    /// would live on after an acknowledged abort).
    async fn delete_upload_everywhere(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<()> {
        let answers = on_all(&self.drives, |d| {
            let (b, k, u) = (bucket.to_string(), key.to_string(), upload_id.to_string());
            async move { d.delete_upload(&b, &k, &u).await }
        })
        .await;
        let absent = |a: &std::result::Result<(), DriveError>| {
            matches!(
                a,
                Err(DriveError::FileNotFound | DriveError::InvalidName(_))
            )
        };
        if answers.iter().all(absent) {
            return Err(Error::NoSuchUpload);
        }
        let gone = answers.iter().filter(|a| a.is_ok() || absent(a)).count();
        if gone >= self.set_write_quorum() {
            return Ok(());
        }
        Err(Error::WriteQuorum {
            have: gone,
            need: self.set_write_quorum(),
        })
    }

    /// AbortMultipartUpload.
    pub async fn abort_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<()> {
        let _guard = self
            .locks
            .lock(&Self::upload_lock(bucket, key, upload_id))
            .await?;
        match self.delete_upload_everywhere(bucket, key, upload_id).await {
            Err(Error::NoSuchUpload) => {
                self.require_bucket(bucket).await?;
                Err(Error::NoSuchUpload)
            }
            other => other,
        }
    }

    /// ListMultipartUploads: one page of the bucket's uploads, by key then initiation time.
    pub async fn list_multipart_uploads(
        &self,
        bucket: &str,
        opts: ListUploadsOptions,
    ) -> Result<ListUploadsResult> {
        self.require_bucket(bucket).await?;
        let answers = on_all(&self.drives, |d| {
            let b = bucket.to_string();
            async move { d.list_uploads(Some(&b)).await }
        })
        .await;
        let rq = self.set_read_quorum();
        let ok = count_ok(&answers);
        if ok < rq {
            return Err(Error::ReadQuorum { have: ok, need: rq });
        }
        let mut seen: BTreeMap<String, (UploadMeta, usize)> = BTreeMap::new();
        for m in answers.into_iter().flatten().flatten() {
            match seen.get_mut(&m.upload_id) {
                Some(e) if same_upload(&e.0, &m) => e.1 += 1,
                Some(_) => {}
                None => {
                    seen.insert(m.upload_id.clone(), (m, 1));
                }
            }
        }
        let mut uploads: Vec<UploadInfo> = seen
            .into_values()
            .filter(|(m, n)| *n >= read_quorum(m.erasure.data as usize, m.erasure.parity as usize))
            .map(|(m, _)| upload_info(&m))
            .filter(|u| u.key.starts_with(&opts.prefix))
            .collect();
        uploads.sort_by(|a, b| {
            (&a.key, a.initiated_ns, &a.upload_id).cmp(&(&b.key, b.initiated_ns, &b.upload_id))
        });
        Ok(page_uploads(uploads, &opts))
    }

    /// GetObject with `partNumber`: the bytes of one part of a completed object.
    /// The object's info and its parts as stored (a multipart object's non-empty parts, numbered
    /// from 1; one part for any other object).
    pub async fn object_parts(
        &self,
        bucket: &str,
        key: &str,
        version: Option<crate::api::VersionId>,
    ) -> Result<(ObjectInfo, Vec<crate::api::ObjectPart>)> {
        // A delete marker has no parts: the latest is `LatestIsDeleteMarker`, a named one
        // `VersionIsDeleteMarker`, as for GET.
        let (meta, _) = self.resolve_version(bucket, key, version).await?;
        let parts = meta
            .parts
            .iter()
            .map(|p| crate::api::ObjectPart {
                number: p.number,
                size: if crate::sse::is_encrypted(&meta) {
                    crate::sse::part_plain_size(p.size).unwrap_or(0)
                } else {
                    p.size
                },
            })
            .collect();
        Ok((object_info(bucket, key, &meta), parts))
    }

    /// An encrypted object's part is opened with `opener` (`KeyRequired` without one).
    pub async fn get_object_part(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        part_number: u32,
        opener: Option<&crate::api::KeyOpener>,
    ) -> Result<GetObjectReader> {
        // The object may be replaced between reading its parts and reading the bytes: the
        // reader's ETag says which version was read, and a mismatch is read again.
        for _ in 0..3 {
            let (meta, _) = self.resolve_version(bucket, key, None).await?;
            let idx = part_number as usize;
            if idx == 0 || idx > meta.parts.len() {
                return Err(Error::InvalidPartNumber {
                    part: part_number,
                    parts: meta.parts.len(),
                });
            }
            // Plaintext sizes: an encrypted object's parts are stored sealed.
            let sizes: Vec<u64> = if crate::sse::is_encrypted(&meta) {
                meta.parts
                    .iter()
                    .map(|p| crate::sse::part_plain_size(p.size))
                    .collect::<Result<_>>()?
            } else {
                meta.parts.iter().map(|p| p.size).collect()
            };
            let offset: u64 = sizes[..idx - 1].iter().sum();
            let len = sizes[idx - 1];
            let range = (len > 0).then(|| HttpRange::FromTo(offset, offset + len - 1));
            // The same version, by id, when the bucket is versioned: a newer version
            // committed in between does not change what is read.
            let version = meta.version_id.map(crate::api::VersionId::Id);
            let reader = self
                .get_object_decrypted(bucket, key, version, range, opener)
                .await?;
            if reader.info.etag == meta.etag {
                return Ok(GetObjectReader {
                    range: (offset, len),
                    ..reader
                });
            }
            debug!(
                bucket,
                key, "object replaced while reading a part; reading again"
            );
        }
        Err(Error::Internal(
            "the object kept changing while one of its parts was read".into(),
        ))
    }

    /// Removes every upload of `bucket` from every drive (the bucket was deleted). Best effort:
    /// what is left expires.
    pub async fn remove_bucket_uploads(&self, bucket: &str) {
        for d in &self.drives {
            let Ok(uploads) = d.list_uploads(Some(bucket)).await else {
                continue;
            };
            for u in uploads {
                if let Err(e) = d.delete_upload(&u.bucket, &u.key, &u.upload_id).await {
                    debug!(drive = d.endpoint(), upload_id = %u.upload_id, error = %e, "cannot remove an upload of a deleted bucket");
                }
            }
        }
    }

    /// Removes uploads started more than `expiry` ago, on each drive independently (a copy left
    /// on a minority of drives goes too). Returns how many upload directories were removed.
    pub async fn remove_stale_uploads(&self, expiry: Duration) -> usize {
        let cutoff = self
            .now_ns()
            .saturating_sub(i64::try_from(expiry.as_nanos()).unwrap_or(i64::MAX));
        let mut removed = 0;
        for d in &self.drives {
            let uploads = match d.list_uploads(None).await {
                Ok(u) => u,
                Err(e) => {
                    debug!(drive = d.endpoint(), error = %e, "cannot list uploads for expiry");
                    continue;
                }
            };
            for u in uploads.iter().filter(|u| u.initiated_ns < cutoff) {
                match d.delete_upload(&u.bucket, &u.key, &u.upload_id).await {
                    Ok(()) => removed += 1,
                    Err(DriveError::FileNotFound) => {}
                    Err(e) => {
                        warn!(drive = d.endpoint(), upload_id = %u.upload_id, error = %e, "cannot remove a stale upload")
                    }
                }
            }
        }
        if removed > 0 {
            info!(removed, "removed stale multipart uploads");
        }
        removed
    }
}

/// Applies markers, the delimiter and the page size to uploads sorted by key and time.
fn page_uploads(uploads: Vec<UploadInfo>, opts: &ListUploadsOptions) -> ListUploadsResult {
    let mut out = ListUploadsResult::default();
    let delimiter = opts.delimiter.as_deref().filter(|d| !d.is_empty());
    // Where the page starts.
    let start = match (&opts.key_marker, &opts.upload_id_marker) {
        (None, _) => 0,
        (Some(km), Some(um)) if !um.is_empty() => {
            match uploads
                .iter()
                .position(|u| &u.key == km && &u.upload_id == um)
            {
                Some(p) => p + 1,
                None => uploads
                    .iter()
                    .position(|u| &u.key > km || (&u.key == km && &u.upload_id > um))
                    .unwrap_or(uploads.len()),
            }
        }
        (Some(km), _) => uploads
            .iter()
            .position(|u| &u.key > km)
            .unwrap_or(uploads.len()),
    };
    if opts.max_uploads == 0 {
        return out;
    }
    let mut count = 0;
    let mut it = uploads.into_iter().skip(start).peekable();
    while let Some(u) = it.next() {
        let cp = delimiter.and_then(|d| {
            let rest = &u.key[opts.prefix.len()..];
            rest.find(d)
                .map(|i| format!("{}{}", opts.prefix, &rest[..i + d.len()]))
        });
        if let Some(cp) = cp {
            // A common prefix the key marker names was returned on an earlier page.
            if opts.key_marker.as_deref() == Some(cp.as_str()) {
                continue;
            }
            if out.common_prefixes.last() == Some(&cp) {
                continue;
            }
            if count == opts.max_uploads {
                out.is_truncated = true;
                break;
            }
            out.next_key_marker = Some(cp.clone());
            out.next_upload_id_marker = None;
            out.common_prefixes.push(cp);
        } else {
            if count == opts.max_uploads {
                out.is_truncated = true;
                break;
            }
            out.next_key_marker = Some(u.key.clone());
            out.next_upload_id_marker = Some(u.upload_id.clone());
            out.uploads.push(u);
        }
        count += 1;
        // Skip the rest of a common prefix cheaply, so truncation is only said when more follows.
        if let (Some(cp), Some(_)) = (out.common_prefixes.last(), delimiter) {
            if out.next_upload_id_marker.is_none() {
                while it.peek().is_some_and(|n| n.key.starts_with(cp.as_str())) {
                    it.next();
                }
            }
        }
    }
    if !out.is_truncated {
        out.next_key_marker = None;
        out.next_upload_id_marker = None;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(key: &str, id: &str, t: i64) -> UploadInfo {
        UploadInfo {
            bucket: "b".into(),
            key: key.into(),
            upload_id: id.into(),
            initiated_ns: t,
            checksum_algorithm: None,
        }
    }

    fn opts(max: usize) -> ListUploadsOptions {
        ListUploadsOptions {
            max_uploads: max,
            ..Default::default()
        }
    }

    #[test]
    fn pages_follow_markers() {
        let all = vec![
            up("a", "2", 1),
            up("a", "1", 2),
            up("b", "3", 1),
            up("c", "4", 1),
        ];
        let p1 = page_uploads(all.clone(), &opts(2));
        assert_eq!(p1.uploads, all[..2].to_vec());
        assert!(p1.is_truncated);
        assert_eq!(p1.next_key_marker.as_deref(), Some("a"));
        assert_eq!(p1.next_upload_id_marker.as_deref(), Some("1"));
        let mut o = opts(2);
        o.key_marker = p1.next_key_marker;
        o.upload_id_marker = p1.next_upload_id_marker;
        let p2 = page_uploads(all.clone(), &o);
        assert_eq!(p2.uploads, all[2..].to_vec());
        assert!(!p2.is_truncated);
        assert_eq!(p2.next_key_marker, None);
        // A key marker alone skips every upload of that key.
        let mut o = opts(10);
        o.key_marker = Some("a".into());
        assert_eq!(page_uploads(all.clone(), &o).uploads, all[2..].to_vec());
        assert!(page_uploads(all, &opts(0)).uploads.is_empty());
    }

    #[test]
    fn delimiter_groups_prefixes() {
        let all = vec![
            up("dir/a", "1", 1),
            up("dir/b", "2", 1),
            up("top", "3", 1),
            up("zed/x", "4", 1),
        ];
        let mut o = opts(2);
        o.delimiter = Some("/".into());
        let p1 = page_uploads(all.clone(), &o);
        assert_eq!(p1.common_prefixes, vec!["dir/".to_string()]);
        assert_eq!(p1.uploads, vec![all[2].clone()]);
        assert!(p1.is_truncated);
        assert_eq!(p1.next_key_marker.as_deref(), Some("top"));
        o.key_marker = p1.next_key_marker;
        o.upload_id_marker = p1.next_upload_id_marker;
        let p2 = page_uploads(all, &o);
        assert_eq!(p2.common_prefixes, vec!["zed/".to_string()]);
        assert!(p2.uploads.is_empty());
        assert!(!p2.is_truncated);
    }
}
