//! Per-object locks: the [`Locker`] trait the erasure set takes its locks from, and [`NsLock`],
//! its in-process implementation (commits, deletes and heals of one key never interleave within
//! one process). The cluster-wide implementation, granted by a quorum of the set's nodes, is
//! [`crate::dsync::DistLocker`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::error::Result;

/// Grants exclusive locks on names (`bucket/key`, or a multipart upload's or part's name).
///
/// A lock is held until its [`LockGuard`] is dropped. Taking a lock may fail (a distributed
/// locker that cannot reach a quorum in time answers [`crate::Error::LockTimeout`]); the local
/// one never fails.
#[async_trait::async_trait]
pub trait Locker: Send + Sync + std::fmt::Debug {
    /// Waits for the lock on `name` and returns its guard.
    async fn lock(&self, name: &str) -> Result<LockGuard>;
}

/// Holds a lock taken from a [`Locker`]; dropping it releases the lock.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    _inner: Box<dyn Send + Sync>,
}

impl LockGuard {
    /// A guard whose release is the drop of `inner` (for implementations of [`Locker`]).
    pub fn new(inner: impl Send + Sync + 'static) -> LockGuard {
        LockGuard {
            _inner: Box::new(inner),
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LockGuard")
    }
}

type Table = Mutex<HashMap<String, Arc<AsyncMutex<()>>>>;

/// A table of named async locks within one process; entries exist only while someone holds or
/// waits for them.
#[derive(Debug, Default)]
pub struct NsLock {
    map: Arc<Table>,
}

/// Holds the lock on one name of an [`NsLock`] until dropped.
pub struct NsGuard {
    table: Arc<Table>,
    name: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl NsLock {
    /// Waits for the lock on `name`.
    pub async fn acquire(&self, name: &str) -> NsGuard {
        let m = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(name.to_owned()).or_default().clone()
        };
        let guard = m.lock_owned().await;
        NsGuard {
            table: self.map.clone(),
            name: name.to_owned(),
            guard: Some(guard),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[async_trait::async_trait]
impl Locker for NsLock {
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        Ok(LockGuard::new(self.acquire(name).await))
    }
}

impl Drop for NsGuard {
    fn drop(&mut self) {
        self.guard.take();
        let mut map = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = map.get(&self.name) {
            // Only the table holds it: nobody else waits, so the entry can go.
            if Arc::strong_count(m) == 1 {
                map.remove(&self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn excludes_and_cleans_up() {
        let t = Arc::new(NsLock::default());
        let g = t.acquire("a").await;
        let t2 = t.clone();
        let waiter = tokio::spawn(async move {
            let _g = t2.acquire("a").await;
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        let _other = t.acquire("b").await; // another name is not blocked
        drop(g);
        waiter.await.unwrap();
        drop(_other);
        assert_eq!(t.len(), 0);
    }

    #[tokio::test]
    async fn works_as_a_locker() {
        let t: Arc<dyn Locker> = Arc::new(NsLock::default());
        let g = t.lock("a").await.unwrap();
        let t2 = t.clone();
        let waiter = tokio::spawn(async move {
            let _g = t2.lock("a").await.unwrap();
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(g);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
    }
}
