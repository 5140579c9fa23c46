//! Healing what a set holds besides objects: the bucket directory itself, the bucket's
//! configuration blobs (every name, whatever it holds: CORS, versioning, and whatever feature
//! stores its configuration through [`ErasureSet::write_bucket_config`], and the deployment's
//! own blobs: IAM state, in the system namespace), and the multipart
//! uploads in progress (their upload metadata; and uploads that are dead on a quorum are removed
//! from the drives still holding them).
//!
//! The rules are those of an object's versions: a value a read quorum agrees on is copied,
//! byte for byte, to the drives that lack it or hold another; a value so few drives hold that no
//! write quorum can have held it (a write that failed, or a delete that missed a drive) is
//! removed. Each configuration blob is healed under the same lock its writers take, so a heal
//! never overwrites a write that lands meanwhile.

use std::collections::BTreeSet;

use bytes::Bytes;
use quarry_disk::{DriveError, PartMeta, UploadMeta};
use quarry_erasure::bitrot;
use tracing::{debug, info};

use crate::api::HealResult;
use crate::bucket_config::ConfigEnvelope;
use crate::error::{Error, Result};
use crate::quorum::on_all;
use crate::set::ErasureSet;

/// A [`HealResult`] of bucket state says what was healed as `drive: what` entries.
fn healed(r: &mut HealResult, drive: &str, what: String) {
    r.healed.push(format!("{drive}: {what}"));
}

fn failed(r: &mut HealResult, drive: &str, what: String, e: &DriveError) {
    r.failed.push((drive.to_string(), format!("{what}: {e}")));
}

impl ErasureSet {
    /// Name of the lock of one configuration blob (bucket names have no NUL: no collision with
    /// an object's lock).
    pub(crate) fn config_lock(bucket: &str, name: &str) -> String {
        format!("{bucket}\0config\0{name}")
    }

    /// Heals the bucket on this set: its directory on drives that lack it, every configuration
    /// blob, and its multipart uploads' metadata. A bucket no quorum holds is nothing to heal.
    pub async fn heal_bucket(&self, bucket: &str) -> Result<HealResult> {
        let mut r = HealResult::default();
        let answers = on_all(&self.drives, |d| {
            let b = bucket.to_string();
            async move { d.stat_volume(&b).await }
        })
        .await;
        let have = answers.iter().filter(|a| a.is_ok()).count();
        let missing = answers
            .iter()
            .filter(|a| matches!(a, Err(DriveError::VolumeNotFound)))
            .count();
        if have < self.set_read_quorum() {
            if missing + self.set_write_quorum() > self.drives.len() {
                return Ok(r); // no quorum can hold it: deleted (or never made)
            }
            return Err(Error::ReadQuorum {
                have,
                need: self.set_read_quorum(),
            });
        }
        for (pos, a) in answers.iter().enumerate() {
            let d = &self.drives[pos];
            match a {
                Ok(_) => {}
                Err(DriveError::VolumeNotFound) => match d.make_volume(bucket).await {
                    Ok(()) => healed(&mut r, d.endpoint(), format!("bucket {bucket}")),
                    Err(DriveError::VolumeExists) => {}
                    Err(e) => failed(&mut r, d.endpoint(), format!("bucket {bucket}"), &e),
                },
                Err(e) => failed(&mut r, d.endpoint(), format!("bucket {bucket}"), e),
            }
        }
        self.heal_bucket_configs(bucket, &mut r).await;
        self.heal_uploads(bucket, &mut r).await;
        Ok(r)
    }

    /// Heals the deployment's own configuration blobs (IAM state and the like, in the system
    /// namespace [`quarry_disk::SYSTEM_CONFIG`]) as a bucket's.
    pub async fn heal_system_configs(&self) -> HealResult {
        let mut r = HealResult::default();
        self.heal_bucket_configs(quarry_disk::SYSTEM_CONFIG, &mut r)
            .await;
        r
    }

    /// Heals every configuration blob any drive holds for `bucket`.
    async fn heal_bucket_configs(&self, bucket: &str, r: &mut HealResult) {
        let lists = on_all(&self.drives, |d| {
            let b = bucket.to_string();
            async move { d.list_bucket_configs(&b).await }
        })
        .await;
        let mut names = BTreeSet::new();
        for (pos, l) in lists.into_iter().enumerate() {
            match l {
                Ok(l) => names.extend(l),
                // Just made above, or a drive that did not answer: its names are unknown, and
                // any name a quorum holds is named by another drive.
                Err(DriveError::VolumeNotFound) => {}
                Err(e) => failed(r, self.drives[pos].endpoint(), "config list".into(), &e),
            }
        }
        for name in names {
            if let Err(e) = self.heal_bucket_config(bucket, &name, r).await {
                r.failed
                    .push((String::new(), format!("config {bucket}/{name}: {e}")));
            }
        }
    }

    /// Heals one configuration blob under its lock: the newest value a read quorum agrees on is
    /// written (the same bytes) where it is missing or different; a value no read quorum holds
    /// where a read quorum says "not set" is removed.
    async fn heal_bucket_config(&self, bucket: &str, name: &str, r: &mut HealResult) -> Result<()> {
        let _guard = self.locks.lock(&Self::config_lock(bucket, name)).await?;
        let answers = on_all(&self.drives, |d| {
            let (b, n) = (bucket.to_string(), name.to_string());
            async move { d.read_bucket_config(&b, &n).await }
        })
        .await;
        let need = self.set_read_quorum();
        let mut groups: Vec<(&Bytes, usize)> = Vec::new();
        let mut absent = 0;
        for a in &answers {
            match a {
                Ok(v) => match groups.iter_mut().find(|(g, _)| *g == v) {
                    Some(g) => g.1 += 1,
                    None => groups.push((v, 1)),
                },
                Err(DriveError::FileNotFound) => absent += 1,
                Err(_) => {}
            }
        }
        let mut best: Option<(&Bytes, i64)> = None;
        for (raw, count) in &groups {
            if *count < need {
                continue;
            }
            let Ok(env) = ConfigEnvelope::decode(raw) else {
                continue;
            };
            if best.is_none_or(|(_, t)| env.updated_ns > t) {
                best = Some((raw, env.updated_ns));
            }
        }
        let what = format!("config {bucket}/{name}");
        match best {
            Some((value, _)) => {
                for (pos, a) in answers.iter().enumerate() {
                    let d = &self.drives[pos];
                    match a {
                        Ok(v) if v == value => continue,
                        Ok(_) | Err(DriveError::FileNotFound | DriveError::CorruptMeta(_)) => {}
                        Err(e) => {
                            failed(r, d.endpoint(), what.clone(), e);
                            continue;
                        }
                    }
                    match d.write_bucket_config(bucket, name, value).await {
                        Ok(()) => healed(r, d.endpoint(), what.clone()),
                        Err(e) => failed(r, d.endpoint(), what.clone(), &e),
                    }
                }
            }
            // So many drives lack it that no write can have reached a quorum: a failed write,
            // or a delete that missed the drives holding it.
            None if absent + self.set_write_quorum() > self.drives.len() => {
                for (pos, a) in answers.iter().enumerate() {
                    let d = &self.drives[pos];
                    if a.is_ok() {
                        match d.delete_bucket_config(bucket, name).await {
                            Ok(()) => healed(r, d.endpoint(), format!("{what} removed")),
                            Err(e) => failed(r, d.endpoint(), what.clone(), &e),
                        }
                    }
                }
            }
            None => {
                return Err(Error::ReadQuorum {
                    have: groups.iter().map(|g| g.1).max().unwrap_or(0),
                    need,
                })
            }
        }
        Ok(())
    }

    /// Heals the uploads in progress of `bucket`: each upload's metadata goes to the drives that
    /// lack it; an upload so few drives hold that it cannot be live (completed or aborted while
    /// they were away, or a create that failed) is removed from them once it is older than
    /// `leftover_min_age` (a create in flight is never taken for one).
    async fn heal_uploads(&self, bucket: &str, r: &mut HealResult) {
        let lists = on_all(&self.drives, |d| {
            let b = bucket.to_string();
            async move { d.list_uploads(Some(&b)).await }
        })
        .await;
        let mut ids: BTreeSet<(String, String)> = BTreeSet::new();
        for (pos, l) in lists.into_iter().enumerate() {
            match l {
                Ok(l) => ids.extend(l.into_iter().map(|u| (u.key, u.upload_id))),
                Err(DriveError::VolumeNotFound) => {}
                Err(e) => failed(r, self.drives[pos].endpoint(), "upload list".into(), &e),
            }
        }
        for (key, upload_id) in ids {
            if let Err(e) = self.heal_upload(bucket, &key, &upload_id, r).await {
                r.failed.push((
                    String::new(),
                    format!("upload {bucket}/{key} {upload_id}: {e}"),
                ));
            }
        }
    }

    async fn heal_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        r: &mut HealResult,
    ) -> Result<()> {
        let _guard = self
            .locks
            .lock(&Self::upload_lock(bucket, key, upload_id))
            .await?;
        let what = format!("upload {bucket}/{key} {upload_id}");
        let answers = on_all(&self.drives, |d| {
            let (b, k, u) = (bucket.to_string(), key.to_string(), upload_id.to_string());
            async move { d.read_upload(&b, &k, &u).await }
        })
        .await;
        match self.upload_quorum(bucket, key, upload_id).await {
            Ok((meta, _)) => {
                for (pos, a) in answers.iter().enumerate() {
                    let d = &self.drives[pos];
                    match a {
                        Err(DriveError::FileNotFound | DriveError::CorruptMeta(_)) => {}
                        Ok(_) => continue,
                        Err(e) => {
                            failed(r, d.endpoint(), what.clone(), e);
                            continue;
                        }
                    }
                    let mut m: UploadMeta = meta.clone();
                    m.erasure.index = meta.erasure.distribution[pos];
                    match d.create_upload(&m).await {
                        Ok(()) => healed(r, d.endpoint(), what.clone()),
                        Err(e) => failed(r, d.endpoint(), what.clone(), &e),
                    }
                }
                self.heal_upload_parts(bucket, key, upload_id, r).await
            }
            Err(Error::NoSuchUpload | Error::BucketNotFound) => {
                let cutoff = self.now_ns().saturating_sub(
                    i64::try_from(self.cfg.leftover_min_age.as_nanos()).unwrap_or(i64::MAX),
                );
                for (pos, a) in answers.iter().enumerate() {
                    let d = &self.drives[pos];
                    let Ok(u) = a else { continue };
                    if u.initiated_ns > cutoff {
                        debug!(drive = d.endpoint(), upload_id, "a young upload left alone");
                        continue;
                    }
                    match d.delete_upload(bucket, key, upload_id).await {
                        Ok(()) | Err(DriveError::FileNotFound) => {
                            info!(
                                drive = d.endpoint(),
                                bucket, key, upload_id, "removed an upload no quorum holds"
                            );
                            healed(r, d.endpoint(), format!("{what} removed"));
                        }
                        Err(e) => failed(r, d.endpoint(), what.clone(), &e),
                    }
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

impl ErasureSet {
    /// Rebuilds, on every drive that holds the upload but not one of the parts a read quorum
    /// agrees on, that part's shard file (from k good copies, each block's chunk checked against
    /// its hash) and commits it there as an upload of the part does. The caller holds the
    /// upload's lock; each part is rebuilt under the part's lock too.
    async fn heal_upload_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        r: &mut HealResult,
    ) -> Result<()> {
        let q = self.parts_quorum(bucket, key, upload_id).await?;
        let erasure = crate::multipart::upload_erasure(&q.upload)?;
        let lists = on_all(&self.drives, |d| {
            let (b, k, u) = (bucket.to_string(), key.to_string(), upload_id.to_string());
            async move { d.list_parts(&b, &k, &u).await }
        })
        .await;
        for (part, holders) in &q.parts {
            // Drives that hold the upload and answered, without this version of the part.
            let targets: Vec<usize> = (0..self.drives.len())
                .filter(|&pos| !holders[pos] && q.uploads[pos].is_some() && lists[pos].is_ok())
                .collect();
            if targets.is_empty() {
                continue;
            }
            let _guard = self
                .locks
                .lock(&Self::part_lock(bucket, key, upload_id, part.number))
                .await?;
            let what = format!("upload {bucket}/{key} {upload_id} part {}", part.number);
            match self
                .rebuild_part(&q.upload, part, holders, &targets, &erasure)
                .await
            {
                Ok(outcomes) => {
                    for (pos, o) in targets.iter().zip(outcomes) {
                        let d = &self.drives[*pos];
                        match o {
                            Ok(()) => healed(r, d.endpoint(), what.clone()),
                            Err(e) => failed(r, d.endpoint(), what.clone(), &e),
                        }
                    }
                }
                Err(e) => r.failed.push((String::new(), format!("{what}: {e}"))),
            }
        }
        Ok(())
    }

    /// Writes part `part`'s shard file to each drive of `targets`, rebuilt block by block from
    /// the `holders`, and commits it; the outcome per target.
    async fn rebuild_part(
        &self,
        upload: &UploadMeta,
        part: &PartMeta,
        holders: &[bool],
        targets: &[usize],
        erasure: &quarry_erasure::Erasure,
    ) -> Result<Vec<std::result::Result<(), DriveError>>> {
        let (bucket, key, upload_id) = (&upload.bucket[..], &upload.key[..], &upload.upload_id);
        let shard_of = |pos: usize| upload.erasure.distribution[pos] as usize - 1;
        let n = erasure.total_shards();
        let k = erasure.data_shards();
        let tmp_id = self.new_id();
        let mut outcomes: Vec<std::result::Result<(), DriveError>> = Vec::new();
        let mut writers = Vec::new();
        for &pos in targets {
            match self.drives[pos]
                .create_shard_writer(tmp_id, part.data_dir, part.number)
                .await
            {
                Ok(w) => {
                    writers.push(Some(w));
                    outcomes.push(Ok(()));
                }
                Err(e) => {
                    writers.push(None);
                    outcomes.push(Err(e));
                }
            }
        }
        // Sources in shard order, data shards first: when they are whole no decode is needed.
        let mut sources: Vec<usize> = (0..self.drives.len()).filter(|&p| holders[p]).collect();
        sources.sort_by_key(|&p| shard_of(p));
        let mut bad = vec![false; self.drives.len()];
        for block in 0..erasure.block_count(part.size) {
            let framed_len = erasure.framed_len(erasure.block_len(part.size, block));
            let offset = erasure.shard_offset(block);
            let mut present: Vec<Option<Bytes>> = vec![None; n];
            let mut have = 0;
            for &pos in &sources {
                if have == k {
                    break;
                }
                if bad[pos] {
                    continue;
                }
                let read = self.drives[pos]
                    .read_part_shard(
                        (bucket, key, upload_id),
                        part.data_dir,
                        part.number,
                        offset,
                        framed_len,
                    )
                    .await;
                match read {
                    Ok(framed) if bitrot::verify(&framed).is_ok() => {
                        present[shard_of(pos)] = Some(framed.slice(bitrot::HASH_LEN..));
                        have += 1;
                    }
                    Ok(_) | Err(_) => bad[pos] = true,
                }
            }
            if have < k {
                self.delete_tmp_on(targets, tmp_id).await;
                return Err(Error::Corrupt(format!(
                    "{bucket}/{key} upload {upload_id} part {}: fewer than {k} good shards",
                    part.number
                )));
            }
            let mut rebuilt: Vec<Vec<u8>> = targets.iter().map(|_| vec![0u8; framed_len]).collect();
            {
                let slices: Vec<Option<&[u8]>> = present.iter().map(|p| p.as_deref()).collect();
                let mut out: Vec<(usize, &mut [u8])> = targets
                    .iter()
                    .zip(rebuilt.iter_mut())
                    .map(|(&pos, buf)| (shard_of(pos), &mut buf[bitrot::HASH_LEN..]))
                    .collect();
                // A target's own chunk is never among the present ones (it does not hold the
                // part), so every slot asked for is missing.
                erasure
                    .reconstruct_into(&slices, &mut out)
                    .map_err(|e| Error::Corrupt(format!("{bucket}/{key}: {e}")))?;
            }
            for (t, mut framed) in rebuilt.into_iter().enumerate() {
                bitrot::frame_in_place(&mut framed);
                if let (Some(w), Ok(())) = (writers[t].as_mut(), &outcomes[t]) {
                    if let Err(e) = w.write(&framed).await {
                        outcomes[t] = Err(e);
                    }
                }
            }
        }
        for (t, w) in writers.into_iter().enumerate() {
            let Some(w) = w else { continue };
            if outcomes[t].is_ok() {
                if let Err(e) = w.finish().await {
                    outcomes[t] = Err(e);
                    continue;
                }
                let d = &self.drives[targets[t]];
                outcomes[t] = d.commit_part(tmp_id, bucket, key, upload_id, part).await;
            }
        }
        self.delete_tmp_on(targets, tmp_id).await;
        Ok(outcomes)
    }

    async fn delete_tmp_on(&self, targets: &[usize], tmp_id: uuid::Uuid) {
        for &pos in targets {
            let _ = self.drives[pos].delete_tmp(tmp_id).await;
        }
    }
}
