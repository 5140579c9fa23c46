//! Healing one object: every version of it (and every delete marker) that a read quorum of
//! drives agrees on is healed on its own: find the drives whose copy is missing, outdated or
//! corrupt, rebuild their shards from the others, and commit them the same way a PUT does.
//! A version that some drives still hold but that cannot exist (too many drives lack it for any
//! write quorum to have held it: deleted while they were away, or debris of a failed write) is
//! removed from them, so no deleted version comes back.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use quarry_disk::{DriveError, ObjectMeta};
use quarry_erasure::bitrot;
use tracing::{info, warn};

use crate::api::HealResult;
use crate::error::{Error, Result};
use crate::get::{ChunkFault, ShardReader};
use crate::quorum::{pick_meta, MetaQuorum};
use crate::set::ErasureSet;
use crate::versions::agreed_versions;

impl ErasureSet {
    /// Heals `bucket/key` in place, every version of it. An object that no longer exists is
    /// nothing to heal.
    ///
    /// The key's lock is held for the survey and the removal of lost versions, then taken again
    /// for each version's check and repair, not across the whole key: a key with thousands of
    /// versions is healed one version at a time, and a write to it waits for one version's
    /// heal at most (holding it across all of them blocked PUTs to a 7,000-version key for over
    /// a minute). A version written or removed between two steps is decided by the next survey.
    pub async fn heal_object(self: &Arc<Self>, bucket: &str, key: &str) -> Result<HealResult> {
        let lock_name = format!("{bucket}/{key}");
        let mut result = HealResult::default();
        let survey = {
            let _guard = self.locks.lock(&lock_name).await?;
            let Some(survey) = self.survey(bucket, key).await? else {
                return Ok(HealResult::default());
            };
            self.remove_lost_versions(bucket, key, &survey, &mut result)
                .await;
            survey
        };
        // Oldest first: each commit lands in its place in the journal either way.
        for v in survey.agreed.iter().rev() {
            let _guard = self.locks.lock(&lock_name).await?;
            let answers = self.read_version_everywhere(bucket, key, v).await;
            let one = match self
                .check_version(bucket, key, answers, Check::Full)
                .await?
            {
                Some(check) => self.repair_version(bucket, key, check).await?,
                None => HealResult::default(),
            };
            result.failed.extend(one.failed);
            for e in one.healed {
                if !result.healed.contains(&e) {
                    result.healed.push(e);
                }
            }
        }
        if !result.healed.is_empty() {
            info!(bucket, key, healed = ?result.healed, versions = survey.agreed.len(), "healed object");
        }
        Ok(result)
    }

    /// Like [`Self::heal_object`], but first checks `bucket/key` without its lock, reading and
    /// verifying every shard as the heal would, and takes the lock (and checks again under it)
    /// only when that check finds something to repair or a drive it could not check. A deep
    /// pass over a whole deployment then holds no lock while it reads, so writes to the keys it
    /// reads never wait on it; a write racing with the check can only make it look for more,
    /// and the locked heal that follows decides.
    pub async fn heal_object_if_needed(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
    ) -> Result<HealResult> {
        if self.is_whole(bucket, key).await {
            return Ok(HealResult::default());
        }
        self.heal_object(bucket, key).await
    }

    /// Whether every version of `bucket/key` is whole on every drive, every shard read and its
    /// bitrot verified; takes no lock. Any doubt (a drive that failed to answer, no quorum, a
    /// version some drives hold that no quorum can) is "not whole".
    async fn is_whole(self: &Arc<Self>, bucket: &str, key: &str) -> bool {
        let Ok(survey) = self.survey(bucket, key).await else {
            return false;
        };
        let Some(survey) = survey else {
            return true; // gone: nothing to heal
        };
        let index = survey.index();
        if !self.lost_versions(&survey, &index).is_empty() {
            return false;
        }
        // A drive that did not answer (other than "no such key"): not checked, not whole.
        if survey.journals.iter().any(|j| {
            matches!(j, Err(e) if !matches!(e, DriveError::FileNotFound | DriveError::VolumeNotFound))
        }) {
            return false;
        }
        // Each version's copies come from the journals just read, except inline versions,
        // whose shard bytes only a read of that version returns: checking every version of a
        // key then costs one journal read per drive, not one per version (a key with n
        // versions cost n journal reads of n entries each).
        for v in &survey.agreed {
            let answers = if !v.delete_marker && v.data_dir.is_none() {
                self.read_version_everywhere(bucket, key, v).await
            } else {
                index
                    .iter()
                    .map(|j| {
                        j.as_ref()
                            .and_then(|j| j.get(&v.version_id))
                            .map(|m| (*m).clone())
                            .ok_or(DriveError::FileNotFound)
                    })
                    .collect()
            };
            match self.check_version(bucket, key, answers, Check::Quick).await {
                Ok(None) => {}
                Ok(Some(c)) if c.targets.is_empty() && c.result.failed.is_empty() => {}
                _ => return false,
            }
        }
        true
    }

    /// Every drive's journal of `bucket/key` and the versions a read quorum agrees on; `None`
    /// when the object is gone (so many drives lack it that no write quorum can hold any of
    /// its versions).
    async fn survey(&self, bucket: &str, key: &str) -> Result<Option<Survey>> {
        let journals = crate::quorum::on_all(&self.drives, |d| {
            let (b, k) = (bucket.to_string(), key.to_string());
            async move { d.read_versions(&b, &k).await }
        })
        .await;
        let agreed = agreed_versions(&journals, self.set_read_quorum());
        let absent = journals
            .iter()
            .filter(|j| {
                matches!(
                    j,
                    Err(DriveError::FileNotFound) | Err(DriveError::VolumeNotFound)
                )
            })
            .count();
        let answered = absent + journals.iter().filter(|j| j.is_ok()).count();
        let need = self.set_read_quorum();
        let gone = absent + self.set_write_quorum() > self.drives.len();
        if agreed.is_empty() && gone {
            return Ok(None);
        }
        if answered < need || agreed.is_empty() {
            return Err(Error::ReadQuorum {
                have: journals.iter().filter(|j| j.is_ok()).count(),
                need,
            });
        }
        Ok(Some(Survey { journals, agreed }))
    }

    /// Every drive's copy of one version's metadata.
    async fn read_version_everywhere(
        &self,
        bucket: &str,
        key: &str,
        v: &ObjectMeta,
    ) -> Vec<std::result::Result<ObjectMeta, DriveError>> {
        crate::quorum::on_all(&self.drives, |d| {
            let (b, k) = (bucket.to_string(), key.to_string());
            async move { d.read_version(&b, &k, v.version_id).await }
        })
        .await
    }

    /// The scanner's cheap check of `bucket/key`: every drive answers with the same versions,
    /// and every shard file of each is there with the size the erasure code implies. Reads
    /// metadata and file sizes only, no shard data, and takes no lock (a write racing with it
    /// makes it answer "not whole", and the full heal that follows takes the lock). Bitrot
    /// inside a shard of the right size is for the deep pass ([`Self::heal_object`]).
    pub async fn looks_whole(&self, bucket: &str, key: &str) -> bool {
        let journals = crate::quorum::on_all(&self.drives, |d| {
            let (b, k) = (bucket.to_string(), key.to_string());
            async move { d.read_versions(&b, &k).await }
        })
        .await;
        let Some(Ok(first)) = journals.first() else {
            return false;
        };
        let agree = |j: &Vec<ObjectMeta>| {
            j.len() == first.len()
                && j.iter()
                    .zip(first)
                    .all(|(a, b)| crate::quorum::same_version(a, b))
        };
        for (pos, j) in journals.iter().enumerate() {
            let Ok(j) = j else { return false };
            if !agree(j) {
                return false;
            }
            for v in j.iter().filter(|v| !v.delete_marker) {
                let (Ok(erasure), Some(data_dir)) = (crate::get::erasure_of(v), v.data_dir) else {
                    // Inline (in the metadata just read and compared) or no data.
                    continue;
                };
                for part in &v.parts {
                    let want = erasure.shard_file_size(part.size);
                    let got = self.drives[pos]
                        .stat_shard(bucket, key, data_dir, part.number)
                        .await;
                    if !matches!(got, Ok(len) if len == want) {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// The versions each drive holds that no write quorum can hold: more drives answered
    /// without them than a write quorum leaves room for. `(drive position, version)`.
    /// `index` is the survey's [`Survey::index`].
    fn lost_versions<'a>(
        &self,
        survey: &'a Survey,
        index: &[Option<VersionIndex<'a>>],
    ) -> Vec<(usize, &'a ObjectMeta)> {
        let n = self.drives.len();
        let wq = self.set_write_quorum();
        let journals = &survey.journals;
        // Sets of ids, so a key with many versions costs its versions, not their square.
        let agreed: HashSet<Option<uuid::Uuid>> =
            survey.agreed.iter().map(|a| a.version_id).collect();
        let mut lost = Vec::new();
        for (pos, journal) in journals.iter().enumerate() {
            let Ok(journal) = journal else { continue };
            for v in journal {
                if agreed.contains(&v.version_id) {
                    continue;
                }
                let absent = journals
                    .iter()
                    .zip(index)
                    .filter(|(j, ids)| match (j, ids) {
                        (Ok(_), Some(ids)) => !ids.contains_key(&v.version_id),
                        (Err(DriveError::FileNotFound), _) => true,
                        _ => false,
                    })
                    .count();
                if absent + wq > n {
                    lost.push((pos, v)); // else the drives that did not answer may hold it
                }
            }
        }
        lost
    }

    /// Removes from each drive its [`Self::lost_versions`].
    async fn remove_lost_versions(
        &self,
        bucket: &str,
        key: &str,
        survey: &Survey,
        result: &mut HealResult,
    ) {
        for (pos, v) in self.lost_versions(survey, &survey.index()) {
            let drive = &self.drives[pos];
            match drive.delete_version(bucket, key, v.version_id).await {
                Ok(()) | Err(DriveError::FileNotFound) => {
                    info!(drive = drive.endpoint(), bucket, key,
                        version = %quarry_disk::version_name(v.version_id),
                        "removed a version no quorum holds");
                    if !result.healed.contains(&drive.endpoint().to_string()) {
                        result.healed.push(drive.endpoint().to_string());
                    }
                }
                Err(e) => result
                    .failed
                    .push((drive.endpoint().to_string(), e.to_string())),
            }
        }
    }

    /// Checks one version, given every drive's copy of it (`read_version` answers): which
    /// drives need a new copy and which could not be checked. `None`: no drive holds it.
    /// [`Check::Quick`] stops before reading shards when the metadata alone already names a
    /// drive to rewrite.
    async fn check_version(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        answers: Vec<std::result::Result<ObjectMeta, DriveError>>,
        how: Check,
    ) -> Result<Option<VersionCheck>> {
        let (meta, metas) = match pick_meta(&answers, self.set_write_quorum()) {
            MetaQuorum::Found { meta, metas } => (*meta, metas),
            MetaQuorum::NotFound => return Ok(None),
            MetaQuorum::NoQuorum { have, need } => return Err(Error::ReadQuorum { have, need }),
        };
        let mut result = HealResult::default();
        let n = self.drives.len();

        // Which drives need a new copy: those that answered "not there", "corrupt" or with
        // another version. Drives that could not be asked at all are left for later.
        let mut targets: Vec<usize> = Vec::new();
        for (pos, a) in answers.iter().enumerate() {
            match a {
                Ok(_) if metas[pos].is_some() => {}
                Ok(_)
                | Err(DriveError::FileNotFound)
                | Err(DriveError::VolumeNotFound)
                | Err(DriveError::CorruptMeta(_))
                | Err(DriveError::Truncated { .. }) => targets.push(pos),
                Err(e) => result
                    .failed
                    .push((self.drives[pos].endpoint().to_string(), e.to_string())),
            }
        }

        if how == Check::Quick && !(targets.is_empty() && result.failed.is_empty()) {
            return Ok(Some(VersionCheck {
                meta,
                metas,
                answers,
                targets,
                unchecked: Vec::new(),
                result,
            }));
        }
        // Verify every shard of the drives that do have this version, a block's chunks at once.
        let reader = ShardReader::new(self.clone(), bucket, key, &meta, metas.clone())?;
        let n_shards = reader.erasure.total_shards();
        let mut bad = vec![false; n];
        // Drives that could not be asked for a chunk (offline, a broken connection): nothing
        // is known of their copy, so it is neither rewritten nor used as a source, and the
        // heal says it could not check them.
        let mut unreachable: Vec<Option<String>> = vec![None; n];
        for part in &meta.parts {
            for block in 0..reader.erasure.block_count(part.size) {
                let reader = &reader;
                // One stripe for the block's chunks, as a GET takes.
                let mut pieces = reader
                    .stripe(n_shards, reader.framed_len(part, block))
                    .into_iter();
                let checks = (0..n_shards).filter_map(|shard| {
                    let dst = pieces.next();
                    let pos = reader.holder[shard]
                        .filter(|&pos| !bad[pos] && unreachable[pos].is_none())?;
                    Some(async move {
                        let chunk = reader.check_chunk_into(part, block, shard, dst).await;
                        (pos, chunk)
                    })
                });
                for (pos, chunk) in futures::future::join_all(checks).await {
                    match chunk {
                        Ok(_) => {}
                        Err(ChunkFault::Damaged) => bad[pos] = true,
                        Err(ChunkFault::Unreachable(why)) => unreachable[pos] = Some(why),
                    }
                }
            }
        }
        for (pos, b) in bad.iter().enumerate() {
            if *b && !targets.contains(&pos) {
                targets.push(pos);
            }
        }
        let mut unchecked = Vec::new();
        for (pos, why) in unreachable.into_iter().enumerate() {
            if let Some(why) = why {
                warn!(drive = self.drives[pos].endpoint(), bucket, key, error = %why,
                    "heal could not check a drive's shards; left as it is");
                result
                    .failed
                    .push((self.drives[pos].endpoint().to_string(), why));
                unchecked.push(pos);
            }
        }
        Ok(Some(VersionCheck {
            meta,
            metas,
            answers,
            targets,
            unchecked,
            result,
        }))
    }

    /// Rewrites the copies of one version that [`Self::check_version`] found missing, outdated
    /// or corrupt, from the drives whose copy is good.
    async fn repair_version(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        check: VersionCheck,
    ) -> Result<HealResult> {
        let VersionCheck {
            meta,
            metas,
            answers,
            targets,
            unchecked,
            mut result,
        } = check;
        if targets.is_empty() {
            return Ok(result);
        }
        // The rebuilt shards come only from drives that are good.
        let mut source_metas = metas.clone();
        for &pos in targets.iter().chain(&unchecked) {
            source_metas[pos] = None;
        }
        let source = ShardReader::new(self.clone(), bucket, key, &meta, source_metas)?;
        let k = source.erasure.data_shards();
        if source.holder.iter().filter(|h| h.is_some()).count() < k {
            return Err(Error::Corrupt(format!(
                "{bucket}/{key}: fewer than {k} good shards remain; cannot heal"
            )));
        }

        for &pos in &targets {
            if matches!(answers[pos], Err(DriveError::VolumeNotFound)) {
                if let Err(e) = self.drives[pos].make_volume(bucket).await {
                    if !matches!(e, DriveError::VolumeExists) {
                        result
                            .failed
                            .push((self.drives[pos].endpoint().to_string(), e.to_string()));
                    }
                }
            }
        }

        let tmp_id = self.new_id();
        let shard_of = |pos: usize| meta.erasure.distribution[pos] as usize - 1;
        let mut new_inline: Vec<Vec<u8>> = vec![Vec::new(); targets.len()];
        let mut writers = Vec::new();
        let inline = meta.data_dir.is_none();
        let mut ok_targets: Vec<bool> = vec![true; targets.len()];
        for part in &meta.parts {
            if !inline {
                writers.clear();
                let data_dir = meta.data_dir.unwrap_or_default();
                for (t, &pos) in targets.iter().enumerate() {
                    match self.drives[pos]
                        .create_shard_writer(tmp_id, data_dir, part.number)
                        .await
                    {
                        Ok(w) => writers.push(Some(w)),
                        Err(e) => {
                            ok_targets[t] = false;
                            writers.push(None);
                            result
                                .failed
                                .push((self.drives[pos].endpoint().to_string(), e.to_string()));
                        }
                    }
                }
            }
            for block in 0..source.erasure.block_count(part.size) {
                // k good chunks (read at once, where they land), and from them only the targets'
                // chunks, decoded straight behind the room for their hash.
                let shards = source
                    .read_present(part, block)
                    .await
                    .map_err(|e| Error::Corrupt(format!("{bucket}/{key}: cannot heal: {e}")))?;
                let framed_len = source.framed_len(part, block);
                let live: Vec<usize> = (0..targets.len()).filter(|&t| ok_targets[t]).collect();
                let mut framed = self.stripe(live.len(), framed_len);
                {
                    let present: Vec<Option<&[u8]>> = shards.iter().map(|s| s.as_deref()).collect();
                    let mut out: Vec<(usize, &mut [u8])> = Vec::with_capacity(live.len());
                    // The source excludes the targets, so none of their chunks is present.
                    for (&t, f) in live.iter().zip(framed.iter_mut()) {
                        f.set_len(framed_len);
                        out.push((shard_of(targets[t]), &mut f[bitrot::HASH_LEN..]));
                    }
                    source
                        .erasure
                        .reconstruct_into(&present, &mut out)
                        .map_err(|e| Error::Corrupt(format!("{bucket}/{key}: {e}")))?;
                }
                drop(shards);
                for (&t, mut f) in live.iter().zip(framed) {
                    bitrot::frame_in_place(&mut f);
                    if inline {
                        new_inline[t].extend_from_slice(&f);
                    } else if let Some(w) = writers[t].as_mut() {
                        if let Err(e) = w.write_bytes(f.into_bytes()).await {
                            ok_targets[t] = false;
                            result.failed.push((
                                self.drives[targets[t]].endpoint().to_string(),
                                e.to_string(),
                            ));
                        }
                    }
                }
            }
            if !inline {
                for (t, w) in writers.drain(..).enumerate() {
                    if let Some(w) = w {
                        if ok_targets[t] {
                            if let Err(e) = w.finish().await {
                                ok_targets[t] = false;
                                result.failed.push((
                                    self.drives[targets[t]].endpoint().to_string(),
                                    e.to_string(),
                                ));
                            }
                        }
                    }
                }
            }
        }

        for (t, &pos) in targets.iter().enumerate() {
            if !ok_targets[t] {
                continue;
            }
            let mut m: ObjectMeta = meta.clone();
            m.erasure.index = meta.erasure.distribution[pos];
            m.inline = if inline && !meta.delete_marker {
                Some(std::mem::take(&mut new_inline[t]).into())
            } else {
                None
            };
            let drive = &self.drives[pos];
            match drive.rename_data(tmp_id, bucket, key, &m).await {
                Ok(()) => result.healed.push(drive.endpoint().to_string()),
                Err(e) => {
                    warn!(drive = drive.endpoint(), bucket, key, error = %e, "heal commit failed");
                    result
                        .failed
                        .push((drive.endpoint().to_string(), e.to_string()));
                }
            }
        }
        for &pos in &targets {
            let _ = self.drives[pos].delete_tmp(tmp_id).await;
        }
        Ok(result)
    }
}

/// What [`ErasureSet::survey`] found of one object.
struct Survey {
    /// Every drive's journal, in set order.
    journals: Vec<std::result::Result<Vec<ObjectMeta>, DriveError>>,
    /// The versions a read quorum agrees on, newest first.
    agreed: Vec<ObjectMeta>,
}

/// One drive's versions of a key by id.
type VersionIndex<'a> = HashMap<Option<uuid::Uuid>, &'a ObjectMeta>;

impl Survey {
    /// Each drive's versions by id, `None` where its journal was not read: a key with many
    /// versions is looked up in, not scanned, per version.
    fn index(&self) -> Vec<Option<VersionIndex<'_>>> {
        self.journals
            .iter()
            .map(|j| {
                j.as_ref()
                    .ok()
                    .map(|j| j.iter().map(|m| (m.version_id, m)).collect())
            })
            .collect()
    }
}

/// How far [`ErasureSet::check_version`] looks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Every shard read and verified, whatever the metadata says.
    Full,
    /// Stop at the first thing to repair that the metadata shows.
    Quick,
}

/// What [`ErasureSet::check_version`] found of one version, for
/// [`ErasureSet::repair_version`].
struct VersionCheck {
    /// The version the write quorum holds.
    meta: ObjectMeta,
    /// Each drive's copy where it agrees with `meta`.
    metas: Vec<Option<ObjectMeta>>,
    /// Each drive's answer to the read of this version.
    answers: Vec<std::result::Result<ObjectMeta, DriveError>>,
    /// Drives whose copy is to be rewritten.
    targets: Vec<usize>,
    /// Drives that could not be checked: neither rewritten nor used as a source.
    unchecked: Vec<usize>,
    /// Failures so far.
    result: HealResult,
}
