//! Where the object layer takes the time, fresh ids and background work from: a seam, so that a
//! test can replay a seed exactly (TigerBeetle's deterministic simulator is the model).
//!
//! [`TokioRuntime`] is the real one: the system clock, random UUIDs, `tokio::spawn`, and the
//! long-running workers (heal worker, scanner, multipart cleanup) started with each set. A test
//! runtime gives a logical clock and ids drawn from a seed, queues the one-off tasks it is given
//! (a GET's check of the shards it did not read) and keeps the workers off, so that the test runs
//! the background work at points of its choosing ([`crate::ErasureServer::run_background`]):
//! then every drive call of a seed's run happens in the same step in every run.

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use uuid::Uuid;

/// The time, ids and task spawner of an object layer.
pub trait Runtime: Send + Sync + fmt::Debug + 'static {
    /// Wall-clock time in nanoseconds since the Unix epoch: objects' modification times, upload
    /// initiation times, configuration update times.
    fn now_ns(&self) -> i64;

    /// A fresh random id: tmp dirs, data dirs, upload ids.
    fn new_id(&self) -> Uuid;

    /// Runs one-off background work (it must not wait on the caller).
    fn spawn(&self, task: BoxFuture<'static, ()>);

    /// Whether the long-running workers (the heal worker of each set, the scanner, the multipart
    /// cleanup) start on their own. When not, the heal queue is worked through by
    /// [`crate::ErasureServer::run_background`] only, and the others do not run.
    fn workers(&self) -> bool {
        true
    }
}

/// The system clock, random ids and tokio.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioRuntime;

impl Runtime for TokioRuntime {
    fn now_ns(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0)
    }

    fn new_id(&self) -> Uuid {
        Uuid::new_v4()
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) {
        tokio::spawn(task);
    }
}

/// An object layer's [`Runtime`] in its settings ([`crate::ObjectConfig::runtime`]). Two handles
/// are equal when they are the same runtime.
#[derive(Clone)]
pub struct RuntimeHandle(pub Arc<dyn Runtime>);

impl RuntimeHandle {
    pub fn new(runtime: Arc<dyn Runtime>) -> RuntimeHandle {
        RuntimeHandle(runtime)
    }
}

impl Default for RuntimeHandle {
    fn default() -> Self {
        RuntimeHandle(Arc::new(TokioRuntime))
    }
}

impl std::ops::Deref for RuntimeHandle {
    type Target = dyn Runtime;
    fn deref(&self) -> &(dyn Runtime + 'static) {
        &*self.0
    }
}

impl fmt::Debug for RuntimeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for RuntimeHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for RuntimeHandle {}
