//! The model of a versioned bucket for the randomized fault runs: PUTs make versions, DELETEs
//! add delete markers, a DELETE with a version id removes that version, and reads and
//! ListObjectVersions are checked against what was acknowledged. Invariants, per key:
//! - nothing acknowledged is lost: an acknowledged version (object or marker) that no acknowledged
//!   delete removed reads back by its id with its bytes, and, with no drive faulty, is listed;
//! - no version is resurrected: a version whose delete was acknowledged is never listed or read
//!   again;
//! - no version is reordered: ListObjectVersions lists the acknowledged versions newest first,
//!   in the order they were written;
//! - a version the model does not know (a write that failed, and may have landed) holds the bytes
//!   of a failed write (or is a marker from a failed delete), never anything else;
//! - once the faults stop and every key is healed, the listing is stable and complete.

use super::*;

/// One acknowledged version of a key.
#[derive(Debug, Clone)]
struct Known {
    id: VersionId,
    /// `None`: a delete marker.
    data: Option<Arc<Vec<u8>>>,
    /// A delete of it failed: it may be gone.
    maybe_gone: bool,
}

/// What the model knows of one key of a versioned bucket.
#[derive(Debug, Default)]
pub(super) struct VKey {
    /// The acknowledged versions no acknowledged delete removed, oldest first.
    known: Vec<Known>,
    /// What failed writes may have left as versions of unknown id (`None`: a delete marker).
    unknown: Vec<Option<Arc<Vec<u8>>>>,
    /// Versions whose delete was acknowledged: never seen again.
    gone: Vec<VersionId>,
}

impl VKey {
    fn allows_unknown(&self, v: &ObjectInfo) -> bool {
        self.unknown.iter().any(|u| match u {
            None => v.delete_marker,
            Some(d) => !v.delete_marker && d.len() as u64 == v.size && md5_hex(d) == v.etag,
        })
    }
}

/// The versioned model: per key.
pub(super) type Model = BTreeMap<String, VKey>;

pub(super) fn new_model() -> Model {
    KEYS.iter()
        .map(|k| (k.to_string(), VKey::default()))
        .collect()
}

impl Run {
    /// Turns the run's bucket into a versioned one, checked by the versioned model.
    pub async fn versioned(mut self) -> Run {
        self.layer
            .put_bucket_versioning(BUCKET, VersioningState::Enabled)
            .await
            .unwrap();
        self.versions = Some(new_model());
        self
    }

    fn vkey(&mut self, key: &str) -> &mut VKey {
        self.versions.as_mut().unwrap().get_mut(key).unwrap()
    }

    /// Reads one version by id: `Ok(Some(bytes))`, `Ok(None)` for a delete marker, or the error.
    async fn get_version(
        &self,
        key: &str,
        id: VersionId,
    ) -> std::result::Result<Result<Option<Vec<u8>>>, String> {
        let layer = self.layer.clone();
        let key2 = key.to_string();
        let fut = async move {
            let r = match layer
                .get_object_version(BUCKET, &key2, Some(id), None)
                .await
            {
                Ok(r) => r,
                Err(Error::VersionIsDeleteMarker(_)) => return Ok(None),
                Err(e) => return Err(e),
            };
            let mut out = Vec::new();
            let mut s = r.body;
            while let Some(b) = s.next().await {
                out.extend_from_slice(&b?);
            }
            Ok(Some(out))
        };
        self.timed(&format!("GET {key} version {id}"), fut).await
    }

    /// The versions of `key` as ListObjectVersions gives them, newest first.
    async fn list_versions(
        &self,
        key: &str,
    ) -> std::result::Result<Result<Vec<ObjectInfo>>, String> {
        let r = self
            .timed(
                "ListObjectVersions",
                self.layer.list_object_versions(
                    BUCKET,
                    ListVersionsOptions {
                        prefix: key.to_string(),
                        max_keys: 1000,
                        ..Default::default()
                    },
                ),
            )
            .await?;
        Ok(r.map(|page| page.versions.into_iter().filter(|v| v.key == key).collect()))
    }

    /// Checks one read of an acknowledged version against the model.
    fn check_version_read(&mut self, key: &str, k: &Known, got: Result<Option<Vec<u8>>>) -> Check {
        self.totals.checks += 1;
        match got {
            Ok(read) => {
                if read.as_deref() == k.data.as_deref().map(|d| &d[..]) {
                    Ok(())
                } else {
                    Err(format!(
                        "GET {key} version {} returned {:?}, acknowledged as {:?}",
                        k.id,
                        read.map(|b| (b.len(), md5_hex(&b))),
                        k.data.as_ref().map(|d| (d.len(), md5_hex(d)))
                    ))
                }
            }
            Err(Error::NoSuchVersion) if k.maybe_gone => Ok(()),
            Err(Error::NoSuchVersion) => Err(format!(
                "GET {key} version {}: NoSuchVersion, but the version was acknowledged",
                k.id
            )),
            Err(e) => self.error_ok(&format!("GET {key} version {}", k.id), &e),
        }
    }

    /// Checks a listing of `key`'s versions. `complete`: every acknowledged version must be in it
    /// (no drive faulty).
    fn check_version_list(&mut self, key: &str, listed: &[ObjectInfo], complete: bool) -> Check {
        self.totals.checks += 1;
        let vk = &self.versions.as_ref().unwrap()[key];
        let mut positions = Vec::new();
        for (i, v) in listed.iter().enumerate() {
            if vk.gone.contains(&v.version_id) {
                return Err(format!(
                    "{key} version {} is listed again after its delete was acknowledged",
                    v.version_id
                ));
            }
            match vk.known.iter().position(|k| k.id == v.version_id) {
                Some(at) => {
                    let k = &vk.known[at];
                    let matches = match &k.data {
                        None => v.delete_marker,
                        Some(d) => {
                            !v.delete_marker && v.size == d.len() as u64 && v.etag == md5_hex(d)
                        }
                    };
                    if !matches {
                        return Err(format!(
                            "{key} version {} is listed as {} bytes (marker {}), acknowledged as {:?}",
                            v.version_id,
                            v.size,
                            v.delete_marker,
                            k.data.as_ref().map(|d| d.len())
                        ));
                    }
                    positions.push(at);
                }
                None if vk.allows_unknown(v) => {}
                None => {
                    return Err(format!(
                        "{key} lists version {} ({} bytes, marker {}) that no write made",
                        v.version_id, v.size, v.delete_marker
                    ))
                }
            }
            if v.is_latest != (i == 0) {
                return Err(format!(
                    "{key} version {} at position {i} has IsLatest {}",
                    v.version_id, v.is_latest
                ));
            }
        }
        // Newest first: the known versions' creation order, reversed.
        if positions.windows(2).any(|w| w[0] <= w[1]) {
            return Err(format!(
                "{key}'s versions are listed out of the order they were written: {:?}",
                listed.iter().map(|v| v.version_id).collect::<Vec<_>>()
            ));
        }
        if complete {
            for k in &vk.known {
                if !k.maybe_gone && !listed.iter().any(|v| v.version_id == k.id) {
                    return Err(format!(
                        "{key}: acknowledged version {} is not listed (no drive faulty)",
                        k.id
                    ));
                }
            }
        }
        Ok(())
    }

    /// One operation on the versioned bucket.
    pub(super) async fn op_versioned(&mut self) -> Check {
        let key = KEYS[self.rng.gen_range(0..KEYS.len())].to_string();
        let pick = self.rng.gen_range(0..100);
        match pick {
            0..=29 => {
                let data = self.data();
                let piece = self.rng.gen_range(1..20_000);
                self.log(format!(
                    "PUT {key} {} bytes (md5 {})",
                    data.len(),
                    md5_hex(&data)
                ));
                let r = self
                    .timed(
                        "PUT",
                        self.layer.put_object(
                            BUCKET,
                            &key,
                            body(&data, piece),
                            PutOptions {
                                size: Some(data.len() as u64),
                                ..Default::default()
                            },
                        ),
                    )
                    .await?;
                self.log(format!("  -> {:?}", r.as_ref().map(|i| i.version_id)));
                match r {
                    Ok(info) => {
                        self.totals.checks += 1;
                        if !matches!(info.version_id, VersionId::Id(_)) {
                            return Err(format!("PUT {key}: no version id in {info:?}"));
                        }
                        self.vkey(&key).known.push(Known {
                            id: info.version_id,
                            data: Some(data),
                            maybe_gone: false,
                        });
                    }
                    Err(e) => {
                        self.vkey(&key).unknown.push(Some(data));
                        self.error_ok(&format!("PUT {key}"), &e)?;
                    }
                }
                Ok(())
            }
            30..=41 => {
                self.log(format!("DELETE {key} (a marker)"));
                let r = self
                    .timed(
                        "DELETE",
                        self.layer.delete_object_version(BUCKET, &key, None),
                    )
                    .await?;
                self.log(format!("  -> {r:?}"));
                match r {
                    Ok(res) => {
                        let Some(id) = res.version_id.filter(|_| res.delete_marker) else {
                            return Err(format!("DELETE {key}: no marker in {res:?}"));
                        };
                        self.vkey(&key).known.push(Known {
                            id,
                            data: None,
                            maybe_gone: false,
                        });
                    }
                    Err(e) => {
                        self.vkey(&key).unknown.push(None);
                        self.error_ok(&format!("DELETE {key}"), &e)?;
                    }
                }
                Ok(())
            }
            42..=53 => {
                let n = self.vkey(&key).known.len();
                if n == 0 {
                    return Ok(());
                }
                let at = self.rng.gen_range(0..n);
                let id = self.vkey(&key).known[at].id;
                self.log(format!("DELETE {key} version {id}"));
                let r = self
                    .timed(
                        "DELETE version",
                        self.layer.delete_object_version(BUCKET, &key, Some(id)),
                    )
                    .await?;
                self.log(format!("  -> {r:?}"));
                match r {
                    Ok(_) => {
                        let vk = self.vkey(&key);
                        vk.known.remove(at);
                        vk.gone.push(id);
                    }
                    Err(e) => {
                        self.vkey(&key).known[at].maybe_gone = true;
                        self.error_ok(&format!("DELETE {key} version {id}"), &e)?;
                    }
                }
                Ok(())
            }
            54..=73 => {
                let n = self.vkey(&key).known.len();
                if n == 0 {
                    return Ok(());
                }
                let at = self.rng.gen_range(0..n);
                let k = self.vkey(&key).known[at].clone();
                self.log(format!("GET {key} version {}", k.id));
                let r = self.get_version(&key, k.id).await?;
                self.log(format!(
                    "  -> {:?}",
                    r.as_ref()
                        .map(|b| b.as_ref().map(|b| (b.len(), md5_hex(b))))
                ));
                self.check_version_read(&key, &k, r)
            }
            74..=89 => {
                self.log(format!("LIST VERSIONS {key}"));
                match self.list_versions(&key).await? {
                    Ok(listed) => {
                        self.log(format!(
                            "  -> {:?}",
                            listed
                                .iter()
                                .map(|v| (v.version_id, v.delete_marker))
                                .collect::<Vec<_>>()
                        ));
                        let complete = !self.any_faulty();
                        self.check_version_list(&key, &listed, complete)
                    }
                    Err(e) => self.error_ok(&format!("LIST VERSIONS {key}"), &e),
                }
            }
            _ => {
                self.log(format!("HEAL {key}"));
                let r = self
                    .timed("heal_object", self.layer.heal_object(BUCKET, &key))
                    .await?;
                self.log(format!("  -> {r:?}"));
                if let Err(e) = r {
                    self.error_ok(&format!("HEAL {key}"), &e)?;
                }
                Ok(())
            }
        }
    }

    /// Faults off, every key healed: each key's listing is complete, in order, the same twice,
    /// and every acknowledged version reads back by id.
    pub(super) async fn settle_versioned(&mut self) -> Check {
        self.all_clean();
        self.set_step(u64::MAX / 2);
        self.log("faults off; healing every key".into());
        self.background().await?;
        let keys: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
        for key in &keys {
            let r = self
                .timed("heal_object", self.layer.heal_object(BUCKET, key))
                .await?;
            if let Err(e) = r {
                return Err(format!("heal of {key} after the faults stopped: {e}"));
            }
        }
        for key in &keys {
            let first = self
                .list_versions(key)
                .await?
                .map_err(|e| format!("LIST VERSIONS {key} after the heal: {e}"))?;
            self.check_version_list(key, &first, true)?;
            let second = self
                .list_versions(key)
                .await?
                .map_err(|e| format!("LIST VERSIONS {key} after the heal: {e}"))?;
            let ids = |l: &[ObjectInfo]| l.iter().map(|v| v.version_id).collect::<Vec<_>>();
            if ids(&first) != ids(&second) {
                return Err(format!(
                    "{key}'s versions changed between two listings after the heal: {:?} then {:?}",
                    ids(&first),
                    ids(&second)
                ));
            }
            let known = self.vkey(key).known.clone();
            for k in known {
                let listed = first.iter().any(|v| v.version_id == k.id);
                let r = self.get_version(key, k.id).await?;
                match (listed, r) {
                    // A version whose delete failed, and went through: consistently gone.
                    (false, Err(Error::NoSuchVersion)) if k.maybe_gone => {}
                    (_, r) => self.check_version_read(key, &k, r)?,
                }
            }
        }
        self.totals.checks += self
            .timed(
                "the check that the faults left nothing behind",
                self.faults.check_quiet(),
            )
            .await??;
        Ok(())
    }
}
