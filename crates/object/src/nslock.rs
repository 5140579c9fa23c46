//! Per-object locks within one process: commits, deletes and heals of one key never interleave.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// A table of named async locks; entries exist only while someone holds or waits for them.
#[derive(Debug, Default)]
pub struct NsLock {
    map: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
}

/// Holds the lock on one name until dropped.
pub struct NsGuard {
    table: Arc<NsLock>,
    name: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl NsLock {
    pub async fn lock(self: &Arc<Self>, name: String) -> NsGuard {
        let m = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(name.clone()).or_default().clone()
        };
        let guard = m.lock_owned().await;
        NsGuard {
            table: self.clone(),
            name,
            guard: Some(guard),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for NsGuard {
    fn drop(&mut self) {
        self.guard.take();
        let mut map = self.table.map.lock().unwrap_or_else(|p| p.into_inner());
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
        let g = t.lock("a".into()).await;
        let t2 = t.clone();
        let waiter = tokio::spawn(async move {
            let _g = t2.lock("a".into()).await;
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        let _other = t.lock("b".into()).await; // another name is not blocked
        drop(g);
        waiter.await.unwrap();
        drop(_other);
        assert_eq!(t.len(), 0);
    }
}
