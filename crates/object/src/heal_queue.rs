//! The heal worker of one erasure set, and its retry list.
//!
//! The worker takes objects off the heal queue (writes that missed a drive, reads that found
//! damage) and heals them one at a time. A heal that could not reach every drive (a drive or node
//! offline, no quorum, a lock not granted) is not dropped: it goes on a [`RetryList`] and is tried
//! again after a back-off that doubles from `heal_retry_min` to `heal_retry_max`, for as long as it
//! takes, so a drive that comes back is brought in line. Damage that no drive coming back can mend
//! (fewer than k good shards) is tried a few times and then given up. The list is bounded
//! (`heal_retry_limit`): beyond it new failures are dropped and counted, and the scanner finds
//! their objects on its next pass.
//!
//! The worker holds its set weakly: it ends when the set is dropped.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::api::HealResult;
use crate::error::{Error, Result};
use crate::set::{ErasureSet, HealRequest};
use crate::stats::SetCounters;

/// Attempts of a heal that failed for a reason other than an unreachable drive (e.g. too few
/// good shards left), before it is given up.
const LIMITED_ATTEMPTS: u32 = 4;

/// What one heal attempt means for the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Healed, or nothing to heal (healthy, or gone).
    Done,
    /// Some drive could not be reached or written: try again until it can.
    RetryOffline,
    /// Failed in a way a returning drive may or may not mend: try a few times.
    RetryLimited,
}

/// Whether a heal attempt needs another one.
pub(crate) fn verdict(r: &Result<HealResult>) -> Verdict {
    match r {
        Ok(r) if r.failed.is_empty() => Verdict::Done,
        Ok(_) => Verdict::RetryOffline,
        Err(
            Error::ObjectNotFound
            | Error::BucketNotFound
            | Error::InvalidBucketName(_)
            | Error::InvalidKey(_)
            | Error::KeyTooLong
            | Error::NotImplemented(_),
        ) => Verdict::Done,
        Err(Error::Corrupt(_) | Error::Internal(_)) => Verdict::RetryLimited,
        // Quorum, drive and lock errors: drives that did not answer.
        Err(_) => Verdict::RetryOffline,
    }
}

/// Heals waiting for another attempt, ordered by when it is due. Pure: the caller passes the time.
#[derive(Debug)]
pub(crate) struct RetryList {
    min: Duration,
    max: Duration,
    limit: usize,
    /// (due, sequence) -> request; the sequence keeps equal due times apart.
    by_due: BTreeMap<(Instant, u64), HealRequest>,
    /// request -> (failed attempts so far, its key in `by_due`).
    entries: HashMap<HealRequest, (u32, (Instant, u64))>,
    seq: u64,
}

impl RetryList {
    pub fn new(min: Duration, max: Duration, limit: usize) -> Self {
        RetryList {
            min: min.max(Duration::from_millis(1)),
            max: max.max(min),
            limit,
            by_due: BTreeMap::new(),
            entries: HashMap::new(),
            seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The wait after the `attempts`-th failed attempt (1-based): `min` doubling up to `max`.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let shift = attempts.saturating_sub(1).min(30);
        self.min.saturating_mul(1 << shift).min(self.max)
    }

    /// Schedules `req` after its `attempts`-th failed attempt. `false` when the list is full
    /// (and `req` not already on it): the request is dropped.
    pub fn schedule(&mut self, req: HealRequest, attempts: u32, now: Instant) -> bool {
        if let Some((_, due)) = self.entries.remove(&req) {
            self.by_due.remove(&due);
        } else if self.entries.len() >= self.limit {
            return false;
        }
        self.seq += 1;
        let due = (now + self.backoff(attempts), self.seq);
        self.by_due.insert(due, req.clone());
        self.entries.insert(req, (attempts, due));
        true
    }

    /// Takes `req` off the list (it is being healed now); returns its failed attempts so far.
    pub fn take(&mut self, req: &HealRequest) -> Option<u32> {
        let (attempts, due) = self.entries.remove(req)?;
        self.by_due.remove(&due);
        Some(attempts)
    }

    /// The first `n` requests by due time, with their failed attempts and when each is due.
    pub fn first(&self, n: usize) -> impl Iterator<Item = (&HealRequest, u32, Instant)> {
        self.by_due.iter().take(n).map(|((due, _), req)| {
            let attempts = self.entries.get(req).map_or(0, |(a, _)| *a);
            (req, attempts, *due)
        })
    }

    /// When the next request is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.by_due.keys().next().map(|(t, _)| *t)
    }

    /// Takes the first request due at `now`, with its failed attempts so far.
    pub fn pop_due(&mut self, now: Instant) -> Option<(HealRequest, u32)> {
        let key = *self.by_due.keys().next()?;
        if key.0 > now {
            return None;
        }
        let req = self.by_due.remove(&key)?;
        let attempts = self.entries.remove(&req).map_or(0, |(a, _)| a);
        Some((req, attempts))
    }
}

/// The heal queue of a set and its retry list: worked through by the worker task
/// ([`spawn_heal_worker`]), or, under a runtime without workers, by whoever calls
/// [`HealWorker::drain`] ([`crate::ErasureServer::run_background`]).
pub(crate) struct HealWorker {
    rx: mpsc::Receiver<HealRequest>,
    /// The set's retry list ([`ErasureSet::heal_retry`]), shared so that the worker task need
    /// not hold the set while it waits.
    retry: Arc<Mutex<RetryList>>,
}

/// The retry list, locked (never across an await).
fn locked(retry: &Mutex<RetryList>) -> std::sync::MutexGuard<'_, RetryList> {
    retry.lock().unwrap_or_else(|p| p.into_inner())
}

impl HealWorker {
    pub fn new(set: &ErasureSet, rx: mpsc::Receiver<HealRequest>) -> HealWorker {
        HealWorker {
            rx,
            retry: set.heal_retry.clone(),
        }
    }

    /// Heals what is queued, in queue order, then tries every heal on the retry list once (in
    /// due order, whether due or not). Heals queued meanwhile wait for the next call.
    pub async fn drain(&mut self, set: &Arc<ErasureSet>) {
        let mut queued = Vec::new();
        while let Ok(req) = self.rx.try_recv() {
            queued.push(req);
        }
        for req in queued {
            let prior = locked(&self.retry).take(&req).unwrap_or(0);
            set.heal_done(&req);
            heal_one(set, req, prior).await;
        }
        let everything = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        let mut round = Vec::new();
        while let Some(due) = locked(&self.retry).pop_due(everything) {
            round.push(due);
        }
        for (req, prior) in round {
            heal_one(set, req, prior).await;
        }
    }
}

/// Starts the heal worker of `set` on its queue. It holds the set weakly and ends when the set is
/// dropped (which closes the queue).
pub(crate) fn spawn_heal_worker(set: &Arc<ErasureSet>, worker: HealWorker) {
    let weak = Arc::downgrade(set);
    let HealWorker { mut rx, retry } = worker;
    set.cfg.runtime.spawn(Box::pin(async move {
        loop {
            let next_due = locked(&retry).next_due();
            let (req, prior, queued) = tokio::select! {
                r = rx.recv() => match r {
                    Some(req) => {
                        let prior = locked(&retry).take(&req).unwrap_or(0);
                        (req, prior, true)
                    }
                    None => return,
                },
                () = sleep_until(next_due) => match locked(&retry).pop_due(Instant::now()) {
                    Some((req, prior)) => (req, prior, false),
                    None => continue,
                },
            };
            let Some(set) = weak.upgrade() else { return };
            if queued {
                // Taken off the pending set first: damage found while this heal runs queues the
                // object again rather than being lost.
                set.heal_done(&req);
            }
            heal_one(&set, req, prior).await;
        }
    }));
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// One attempt at healing `req`, which failed `prior` times before; schedules a retry if needed.
async fn heal_one(set: &Arc<ErasureSet>, req: HealRequest, prior: u32) {
    let (bucket, key) = (&req.0, &req.1);
    let counters = &set.counters;
    set.heal_now(Some(&req));
    let result = set.heal_object(bucket, key).await;
    set.heal_now(None);
    if let Ok(r) = &result {
        if !r.healed.is_empty() {
            SetCounters::add(&counters.healed_objects, 1);
            if prior > 0 {
                info!(bucket, key, attempts = prior + 1, healed = ?r.healed, "healed on retry");
            }
        }
    }
    let v = verdict(&result);
    if v == Verdict::Done {
        return;
    }
    SetCounters::add(&counters.heal_failed, 1);
    let attempts = prior.saturating_add(1);
    let why = match &result {
        Ok(r) => r
            .failed
            .iter()
            .map(|(d, e)| format!("{d}: {e}"))
            .collect::<Vec<_>>()
            .join("; "),
        Err(e) => e.to_string(),
    };
    if v == Verdict::RetryLimited && attempts >= LIMITED_ATTEMPTS {
        SetCounters::add(&counters.heal_given_up, 1);
        warn!(bucket, key, attempts, why, "heal failed; giving up");
        return;
    }
    // The first failure is worth a warning; the retries of an object whose drive is down for
    // hours are not.
    if attempts == 1 {
        warn!(bucket, key, why, "heal incomplete; will retry");
    } else {
        debug!(bucket, key, attempts, why, "heal incomplete; will retry");
    }
    let mut retry = locked(&set.heal_retry);
    if retry.schedule(req.clone(), attempts, Instant::now()) {
        SetCounters::add(&counters.heal_retried, 1);
    } else {
        let limit = retry.limit;
        drop(retry);
        SetCounters::add(&counters.heal_retry_dropped, 1);
        warn!(
            bucket,
            key, limit, "heal retry list full; the scanner will find the object later"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(k: &str) -> HealRequest {
        ("b".to_string(), k.to_string())
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let l = RetryList::new(Duration::from_secs(1), Duration::from_secs(60), 10);
        let waits: Vec<u64> = (1..=9).map(|a| l.backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(l.backoff(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn due_order_take_and_bounded_size() {
        let t0 = Instant::now();
        let mut l = RetryList::new(Duration::from_secs(1), Duration::from_secs(60), 2);
        assert!(l.schedule(req("a"), 3, t0)); // due t0 + 4s
        assert!(l.schedule(req("b"), 1, t0)); // due t0 + 1s
        assert!(!l.schedule(req("c"), 1, t0), "full");
        assert_eq!(l.len(), 2);
        // Rescheduling an entry already on the list is always possible.
        assert!(l.schedule(req("a"), 4, t0)); // due t0 + 8s
        assert_eq!(l.len(), 2);
        // What heal/status shows: in due order, with the attempts, at most as many as asked.
        let b_due = t0 + Duration::from_secs(1);
        let a_due = t0 + Duration::from_secs(8);
        let first = |n| {
            l.first(n)
                .map(|(r, a, d)| (r.clone(), a, d))
                .collect::<Vec<_>>()
        };
        assert_eq!(first(5), [(req("b"), 1, b_due), (req("a"), 4, a_due)]);
        assert_eq!(first(1), [(req("b"), 1, b_due)]);
        assert_eq!(l.next_due(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(l.pop_due(t0), None, "nothing due yet");
        assert_eq!(l.pop_due(t0 + Duration::from_secs(1)), Some((req("b"), 1)));
        assert_eq!(l.pop_due(t0 + Duration::from_secs(7)), None);
        assert_eq!(l.take(&req("a")), Some(4));
        assert_eq!(l.take(&req("a")), None);
        assert_eq!(l.len(), 0);
        assert_eq!(l.next_due(), None);
    }

    #[test]
    fn verdicts() {
        let ok = |failed: usize| -> Result<HealResult> {
            Ok(HealResult {
                healed: vec![],
                failed: (0..failed)
                    .map(|i| (format!("d{i}"), "down".into()))
                    .collect(),
            })
        };
        assert_eq!(verdict(&ok(0)), Verdict::Done);
        assert_eq!(verdict(&ok(1)), Verdict::RetryOffline);
        assert_eq!(verdict(&Err(Error::ObjectNotFound)), Verdict::Done);
        assert_eq!(
            verdict(&Err(Error::ReadQuorum { have: 1, need: 2 })),
            Verdict::RetryOffline
        );
        assert_eq!(
            verdict(&Err(Error::Corrupt("x".into()))),
            Verdict::RetryLimited
        );
    }
}
