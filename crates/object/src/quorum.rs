//! Fan-out to the drives of a set and the quorum arithmetic over their answers.

use std::sync::Arc;

use futures::future::join_all;
use quarry_disk::{Drive, DriveError, ObjectMeta};

use crate::api::meta_updated_ns;
use crate::error::Error;

/// Read quorum of an object coded k+m: any k shards rebuild it.
pub fn read_quorum(data: usize, _parity: usize) -> usize {
    data
}

/// Write quorum of an object coded k+m: k, or k+1 when k == m so that two writes that both
/// reached quorum always share a drive.
pub fn write_quorum(data: usize, parity: usize) -> usize {
    debug_assert!(data > 0, "a code has at least one data shard");
    if data == parity {
        data + 1
    } else {
        data
    }
}

/// Runs `f` on every drive concurrently; the answers come back in drive order.
pub async fn on_all<T, F, Fut>(drives: &[Arc<dyn Drive>], f: F) -> Vec<Result<T, DriveError>>
where
    F: Fn(Arc<dyn Drive>) -> Fut,
    Fut: std::future::Future<Output = Result<T, DriveError>>,
{
    join_all(drives.iter().map(|d| f(d.clone()))).await
}

/// Two metadata copies describe the same version of an object when these agree. The data dir
/// and the inline bytes differ per drive by design (each drive holds its own shard).
pub fn same_version(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    a.version_id == b.version_id
        && a.delete_marker == b.delete_marker
        && a.mod_time_ns == b.mod_time_ns
        && a.etag == b.etag
        && a.size == b.size
        && a.erasure.data == b.erasure.data
        && a.erasure.parity == b.erasure.parity
        && a.erasure.block_size == b.erasure.block_size
        && a.erasure.distribution == b.erasure.distribution
        && a.data_dir == b.data_dir
        && meta_updated_ns(&a.headers) == meta_updated_ns(&b.headers)
}

/// The outcome of reading an object's metadata from every drive of its set.
#[derive(Debug)]
pub enum MetaQuorum {
    /// `metas[i]` is drive i's copy when it agrees with the chosen version, else `None`.
    Found {
        meta: Box<ObjectMeta>,
        metas: Vec<Option<ObjectMeta>>,
    },
    NotFound,
    /// Drives answered, but too few agree on one version (or too many failed to answer).
    NoQuorum {
        have: usize,
        need: usize,
    },
}

/// The version of an object that a read quorum of `answers` agrees on, the newest among those
/// with quorum: the index of one copy of it and how many drives hold it. `None`: no version has
/// a read quorum. [`pick_meta`] says what that means; a listing, which shows only found
/// versions, takes the copy without cloning any.
pub fn pick_version<M: std::borrow::Borrow<ObjectMeta>>(
    answers: &[Result<M, DriveError>],
) -> Option<(usize, usize)> {
    // Versions seen: the index of a copy of each, with how many drives hold it.
    let mut groups: Vec<(usize, &ObjectMeta, usize)> = Vec::new();
    for (i, m) in answers
        .iter()
        .enumerate()
        .filter_map(|(i, a)| Some((i, a.as_ref().ok()?.borrow())))
    {
        match groups.iter_mut().find(|(_, rep, _)| same_version(rep, m)) {
            Some(g) => g.2 += 1,
            None => groups.push((i, m, 1)),
        }
    }
    let has_quorum = |m: &ObjectMeta, count: usize| {
        count >= read_quorum(m.erasure.data as usize, m.erasure.parity as usize)
    };
    let (i, meta, count) = groups
        .iter()
        .filter(|(_, m, count)| has_quorum(m, *count))
        .max_by_key(|(_, m, count)| (m.mod_time_ns, meta_updated_ns(&m.headers), *count))?;
    // Version order: no other version with a read quorum is newer than the one picked.
    debug_assert!(
        groups.iter().all(|(_, m, c)| {
            !has_quorum(m, *c)
                || (m.mod_time_ns, meta_updated_ns(&m.headers), *c)
                    <= (meta.mod_time_ns, meta_updated_ns(&meta.headers), *count)
        }),
        "a newer version with quorum was passed over"
    );
    Some((*i, *count))
}

/// Picks the version of an object that a read quorum of drives agrees on. Among versions with
/// quorum the newest wins. `write_quorum` is the set's: the object is `NotFound` only when so
/// many drives say it is absent that no write quorum can hold it (else an acknowledged object
/// whose holders failed to answer would be reported missing).
pub fn pick_meta(answers: &[Result<ObjectMeta, DriveError>], write_quorum: usize) -> MetaQuorum {
    let picked =
        pick_version(answers).and_then(|(i, count)| Some((answers[i].as_ref().ok()?, count)));
    if let Some((meta, count)) = picked {
        let metas = answers
            .iter()
            .map(|a| match a {
                Ok(m) if same_version(m, meta) => Some(m.clone()),
                _ => None,
            })
            .collect::<Vec<_>>();
        debug_assert!(
            metas.iter().flatten().count() >= count && metas.len() == answers.len(),
            "the copies kept are the {count} that agree, one slot per drive"
        );
        return MetaQuorum::Found {
            meta: Box::new(meta.clone()),
            metas,
        };
    }
    let not_found = answers
        .iter()
        .filter(|a| {
            matches!(
                a,
                Err(DriveError::FileNotFound) | Err(DriveError::VolumeNotFound)
            )
        })
        .count();
    let copies: Vec<&ObjectMeta> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
    let best_count = copies
        .iter()
        .map(|m| copies.iter().filter(|c| same_version(m, c)).count())
        .max()
        .unwrap_or(0);
    if not_found + write_quorum > answers.len() {
        // Too few drives remain to hold a write quorum of any version, and none has a read
        // quorum: at most a minority holds a copy (a write that never reached quorum), so the
        // object does not exist. With fewer "absent" answers the others may hold it: unknown.
        return MetaQuorum::NotFound;
    }
    let need = answers
        .iter()
        .filter_map(|a| a.as_ref().ok())
        .map(|m| read_quorum(m.erasure.data as usize, m.erasure.parity as usize))
        .max()
        .unwrap_or(answers.len().div_ceil(2));
    MetaQuorum::NoQuorum {
        have: best_count,
        need,
    }
}

/// Counts the answers that succeeded.
pub fn count_ok<T>(answers: &[Result<T, DriveError>]) -> usize {
    answers.iter().filter(|a| a.is_ok()).count()
}

/// Counts the answers that failed because the drive is full.
pub fn count_full<T>(answers: &[Result<T, DriveError>]) -> usize {
    answers
        .iter()
        .filter(|a| matches!(a, Err(DriveError::DiskFull)))
        .count()
}

/// The error of a write that reached `have` of the `need` drives it needed, `full` others having
/// refused it for lack of space: `StorageFull` when the full drives made the difference, else
/// `WriteQuorum`.
pub fn write_failed(have: usize, need: usize, full: usize) -> Error {
    if full > 0 && have + full >= need {
        Error::StorageFull { have, need }
    } else {
        Error::WriteQuorum { have, need }
    }
}

/// Checks that a write of metadata described by `erasure` reached its write quorum; returns how
/// many drives took it.
pub fn check_write_quorum<T>(
    answers: &[Result<T, DriveError>],
    erasure: &quarry_disk::ErasureInfo,
) -> Result<usize, Error> {
    let ok = count_ok(answers);
    let need = write_quorum(erasure.data as usize, erasure.parity as usize);
    if ok < need {
        return Err(write_failed(ok, need, count_full(answers)));
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_disk::{ErasureInfo, META_VERSION};

    fn meta(t: i64) -> ObjectMeta {
        ObjectMeta {
            version: META_VERSION,
            version_id: None,
            delete_marker: false,
            size: 10,
            mod_time_ns: t,
            etag: format!("e{t}"),
            headers: Default::default(),
            user_meta: Default::default(),
            checksums: Default::default(),
            erasure: ErasureInfo {
                codec: "c".into(),
                bitrot: "b".into(),
                data: 2,
                parity: 2,
                block_size: 1024,
                index: 1,
                distribution: vec![1, 2, 3, 4],
            },
            data_dir: None,
            parts: vec![],
            inline: None,
        }
    }

    #[test]
    fn quorums() {
        assert_eq!(write_quorum(2, 2), 3);
        assert_eq!(write_quorum(4, 2), 4);
        assert_eq!(write_quorum(1, 0), 1);
        assert_eq!(read_quorum(2, 2), 2);
    }

    #[test]
    fn newest_version_with_quorum_wins() {
        let answers = vec![Ok(meta(1)), Ok(meta(2)), Ok(meta(2)), Ok(meta(1))];
        match pick_meta(&answers, 3) {
            MetaQuorum::Found { meta, metas } => {
                assert_eq!(meta.mod_time_ns, 2);
                assert!(metas[0].is_none() && metas[1].is_some() && metas[2].is_some());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn minority_copy_is_not_an_object() {
        let answers = vec![
            Ok(meta(5)),
            Err(DriveError::FileNotFound),
            Err(DriveError::FileNotFound),
            Err(DriveError::FileNotFound),
        ];
        assert!(matches!(pick_meta(&answers, 3), MetaQuorum::NotFound));
    }

    #[test]
    fn absent_on_too_few_drives_is_not_not_found() {
        // 2+2, written on drives 0, 1 and 2 (drive 3 missed it); drives 1 and 2 do not answer.
        let io = || Err(DriveError::Io(std::io::Error::other("down")));
        let answers = vec![Ok(meta(5)), io(), io(), Err(DriveError::FileNotFound)];
        assert!(matches!(
            pick_meta(&answers, 3),
            MetaQuorum::NoQuorum { have: 1, need: 2 }
        ));
        // Two drives say absent: no write quorum can hold it.
        let answers = vec![
            Err(DriveError::FileNotFound),
            io(),
            io(),
            Err(DriveError::FileNotFound),
        ];
        assert!(matches!(pick_meta(&answers, 3), MetaQuorum::NotFound));
    }

    #[test]
    fn full_drives_make_storage_full() {
        assert!(matches!(
            write_failed(2, 3, 1),
            Error::StorageFull { have: 2, need: 3 }
        ));
        assert!(matches!(
            write_failed(1, 3, 1),
            Error::WriteQuorum { have: 1, need: 3 }
        ));
        assert!(matches!(
            write_failed(2, 3, 0),
            Error::WriteQuorum { have: 2, need: 3 }
        ));
        let answers: Vec<Result<(), DriveError>> = vec![
            Ok(()),
            Err(DriveError::DiskFull),
            Err(DriveError::FileNotFound),
        ];
        assert_eq!(count_full(&answers), 1);
    }

    #[test]
    fn offline_drives_are_no_quorum() {
        let io = || Err(DriveError::Unusable("offline".into()));
        let answers = vec![Ok(meta(5)), io(), io(), io()];
        assert!(matches!(
            pick_meta(&answers, 3),
            MetaQuorum::NoQuorum { have: 1, need: 2 }
        ));
    }
}
