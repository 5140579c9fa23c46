//! Bucket configuration blobs (CORS, versioning, and later policy, lifecycle, ...): small named
//! documents stored on every drive of a set, outside the key space (see
//! `quarry_disk::Drive::read_bucket_config`).
//!
//! Each drive holds an envelope, [`ConfigEnvelope`]: a magic, a format version, the time of the
//! write and the payload. A write succeeds once a write quorum of drives has it; a read returns
//! the value a read quorum of drives agrees on (byte for byte, so the same write), the newest
//! such value if several have quorum, or "not set" when a read quorum has none. Writes and
//! deletes take the blob's lock, which its heal (`heal_bucket.rs`) takes too.

use bytes::{BufMut, Bytes, BytesMut};
use quarry_disk::DriveError;

use crate::error::{Error, Result};
use crate::quorum::{count_full, count_ok, on_all, write_failed};
use crate::set::ErasureSet;

/// First bytes of every envelope.
const MAGIC: &[u8; 4] = b"QBCF";
/// The envelope format this build writes and reads.
pub const CONFIG_FORMAT_VERSION: u32 = 1;
/// Magic, version, time.
const HEADER_LEN: usize = 4 + 4 + 8;

/// One stored configuration value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEnvelope {
    /// When the value was written, nanoseconds since the Unix epoch.
    pub updated_ns: i64,
    pub payload: Bytes,
}

impl ConfigEnvelope {
    /// `QBCF | version u32 LE | updated_ns i64 LE | payload`.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(HEADER_LEN + self.payload.len());
        b.put_slice(MAGIC);
        b.put_u32_le(CONFIG_FORMAT_VERSION);
        b.put_i64_le(self.updated_ns);
        b.put_slice(&self.payload);
        b.freeze()
    }

    pub fn decode(bytes: &Bytes) -> std::result::Result<ConfigEnvelope, DriveError> {
        if bytes.len() < HEADER_LEN || &bytes[..4] != MAGIC {
            return Err(DriveError::CorruptMeta(
                "bucket configuration envelope has no QBCF header".into(),
            ));
        }
        let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if version != CONFIG_FORMAT_VERSION {
            return Err(DriveError::UnsupportedVersion {
                found: version,
                supported: CONFIG_FORMAT_VERSION,
            });
        }
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&bytes[8..16]);
        Ok(ConfigEnvelope {
            updated_ns: i64::from_le_bytes(ts),
            payload: bytes.slice(HEADER_LEN..),
        })
    }
}

/// What one drive said about a blob.
enum Answer {
    Value(Bytes),
    Absent,
    NoBucket,
    Failed,
}

impl ErasureSet {
    /// The value of configuration `name` of `bucket` a read quorum agrees on; `None` when not set.
    pub async fn read_bucket_config(&self, bucket: &str, name: &str) -> Result<Option<Bytes>> {
        let answers = on_all(&self.drives, |d| {
            let (bucket, name) = (bucket.to_owned(), name.to_owned());
            async move { d.read_bucket_config(&bucket, &name).await }
        })
        .await;
        let need = self.set_read_quorum();
        let answers: Vec<Answer> = answers
            .into_iter()
            .map(|a| match a {
                Ok(b) => Answer::Value(b),
                Err(DriveError::FileNotFound) => Answer::Absent,
                Err(DriveError::VolumeNotFound) => Answer::NoBucket,
                Err(DriveError::InvalidName(why)) => {
                    // The same on every drive: not a quorum question.
                    tracing::debug!(why, "invalid bucket configuration name");
                    Answer::Failed
                }
                Err(e) => {
                    tracing::debug!(bucket, name, error = %e, "bucket configuration read failed");
                    Answer::Failed
                }
            })
            .collect();
        pick_config(&answers, need)
    }

    /// [`Self::read_bucket_config`] for the write path: from the set's cache when read within
    /// [`crate::CONFIG_CACHE_TTL`] (a change through this node is seen at once, one through
    /// another node within that time; see [`crate::config_cache`]).
    pub async fn read_bucket_config_cached(
        &self,
        bucket: &str,
        name: &str,
    ) -> Result<Option<Bytes>> {
        let miss = match self
            .config_cache
            .lookup(bucket, name, self.cfg.runtime.now_ns())
        {
            Ok(hit) => return Ok(hit),
            Err(miss) => miss,
        };
        let value = self.read_bucket_config(bucket, name).await?;
        self.config_cache.fill(miss, bucket, name, value.clone());
        Ok(value)
    }

    /// Stores configuration `name` of `bucket` on every drive; succeeds on a write quorum.
    pub async fn write_bucket_config(
        &self,
        bucket: &str,
        name: &str,
        payload: Bytes,
    ) -> Result<()> {
        // The heal of this blob takes the same lock: it never overwrites this write.
        let _guard = self.locks.lock(&Self::config_lock(bucket, name)).await?;
        let envelope = ConfigEnvelope {
            updated_ns: self.now_ns(),
            payload,
        }
        .encode();
        let answers = on_all(&self.drives, |d| {
            let (bucket, name, envelope) = (bucket.to_owned(), name.to_owned(), envelope.clone());
            async move { d.write_bucket_config(&bucket, &name, &envelope).await }
        })
        .await;
        // Failed or not, some drives may hold the new value now.
        self.config_cache.invalidate(bucket);
        self.config_write_outcome(&answers)
    }

    /// Removes configuration `name` of `bucket` from every drive; succeeds on a write quorum.
    pub async fn delete_bucket_config(&self, bucket: &str, name: &str) -> Result<()> {
        let _guard = self.locks.lock(&Self::config_lock(bucket, name)).await?;
        let answers = on_all(&self.drives, |d| {
            let (bucket, name) = (bucket.to_owned(), name.to_owned());
            async move { d.delete_bucket_config(&bucket, &name).await }
        })
        .await;
        self.config_cache.invalidate(bucket);
        self.config_write_outcome(&answers)
    }

    fn config_write_outcome(&self, answers: &[std::result::Result<(), DriveError>]) -> Result<()> {
        let need = self.set_write_quorum();
        let ok = count_ok(answers);
        if ok >= need {
            return Ok(());
        }
        let no_bucket = answers
            .iter()
            .filter(|a| matches!(a, Err(DriveError::VolumeNotFound)))
            .count();
        // The bucket is missing where the write failed: it does not exist (or is being deleted).
        if no_bucket >= need || (no_bucket > 0 && no_bucket + ok == answers.len()) {
            return Err(Error::BucketNotFound);
        }
        if let Some(Err(DriveError::InvalidName(why))) = answers
            .iter()
            .find(|a| matches!(a, Err(DriveError::InvalidName(_))))
        {
            return Err(Error::Internal(format!("bucket configuration: {why}")));
        }
        Err(write_failed(ok, need, count_full(answers)))
    }
}

/// The value a read quorum agrees on (see the module docs).
fn pick_config(answers: &[Answer], need: usize) -> Result<Option<Bytes>> {
    let mut groups: Vec<(&Bytes, usize)> = Vec::new();
    let (mut absent, mut no_bucket) = (0, 0);
    for a in answers {
        match a {
            Answer::Value(v) => match groups.iter_mut().find(|(g, _)| *g == v) {
                Some(g) => g.1 += 1,
                None => groups.push((v, 1)),
            },
            Answer::Absent => absent += 1,
            Answer::NoBucket => no_bucket += 1,
            Answer::Failed => {}
        }
    }
    if no_bucket >= need {
        return Err(Error::BucketNotFound);
    }
    let mut best: Option<ConfigEnvelope> = None;
    for (raw, count) in groups {
        if count < need {
            continue;
        }
        let env = ConfigEnvelope::decode(raw).map_err(|e| Error::Corrupt(e.to_string()))?;
        if best.as_ref().is_none_or(|b| env.updated_ns > b.updated_ns) {
            best = Some(env);
        }
    }
    if let Some(env) = best {
        return Ok(Some(env.payload));
    }
    if absent >= need {
        return Ok(None);
    }
    let have = answers
        .iter()
        .filter(|a| !matches!(a, Answer::Failed))
        .count();
    Err(Error::ReadQuorum { have, need })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(ts: i64, p: &'static [u8]) -> Bytes {
        ConfigEnvelope {
            updated_ns: ts,
            payload: Bytes::from_static(p),
        }
        .encode()
    }

    #[test]
    fn envelope_round_trip_and_version() {
        let e = env(42, b"<CORSConfiguration/>");
        let d = ConfigEnvelope::decode(&e).unwrap();
        assert_eq!(d.updated_ns, 42);
        assert_eq!(&d.payload[..], b"<CORSConfiguration/>");
        let mut future = e.to_vec();
        future[4] = 9;
        assert!(matches!(
            ConfigEnvelope::decode(&Bytes::from(future)),
            Err(DriveError::UnsupportedVersion { found: 9, .. })
        ));
        assert!(ConfigEnvelope::decode(&Bytes::from_static(b"junk")).is_err());
    }

    #[test]
    fn quorum_picks_agreed_newest_value() {
        use Answer::*;
        let old = env(1, b"old");
        let new = env(2, b"new");
        // Two drives have the new value, one the old, one nothing: quorum 2 -> new.
        let a = [
            Value(new.clone()),
            Value(new.clone()),
            Value(old.clone()),
            Absent,
        ];
        assert_eq!(pick_config(&a, 2).unwrap().unwrap(), &b"new"[..]);
        // Only one drive agrees on anything: no quorum.
        let a = [Value(new.clone()), Value(old.clone()), Failed, Failed];
        assert!(matches!(pick_config(&a, 2), Err(Error::ReadQuorum { .. })));
        // Not set on a quorum.
        let a = [Absent, Absent, Value(old), Failed];
        assert_eq!(pick_config(&a, 2).unwrap(), None);
        // Bucket gone.
        let a = [NoBucket, NoBucket, NoBucket, Failed];
        assert!(matches!(pick_config(&a, 2), Err(Error::BucketNotFound)));
    }
}
