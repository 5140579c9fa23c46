//! Room for connections that have not proved anything yet, and log lines about them that cannot
//! flood a log.
//!
//! [`PreAuth`] holds at most a fixed number of such connections. When a new one comes and every
//! slot is taken, the *oldest* waiting connection gives way (its future is dropped, which closes
//! its socket) instead of the newcomer being refused: a flood of connections that never finish a
//! handshake then cannot keep a real peer out, since a real handshake completes within a round
//! trip or two of its connect, long before `slots` newer connections have pushed it out. Refusing
//! the newcomer instead would let a flooder that keeps every slot busy refuse every peer.
//!
//! [`LogThrottle`] lets one line through per period and counts the ones it held back, so a line
//! logged per refused connection costs a few lines a minute under a flood, not megabytes.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A bounded set of connections waiting to authenticate; see the module doc.
#[derive(Clone)]
pub struct PreAuth {
    slots: usize,
    state: Arc<Mutex<State>>,
}

struct State {
    next: u64,
    /// Waiting connections by age (oldest first); dropping a sender cuts its connection.
    waiting: BTreeMap<u64, oneshot::Sender<()>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // The state stays consistent across a panic (one insert or remove at a time).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection's slot in a [`PreAuth`]; freed when dropped.
pub struct PreAuthSlot {
    id: u64,
    state: Arc<Mutex<State>>,
    cut: oneshot::Receiver<()>,
}

impl PreAuth {
    /// Room for `slots` connections at once (at least one).
    pub fn new(slots: usize) -> PreAuth {
        PreAuth {
            slots: slots.max(1),
            state: Arc::new(Mutex::new(State {
                next: 0,
                waiting: BTreeMap::new(),
            })),
        }
    }

    /// A slot for a new connection, and whether the oldest waiting connection was cut to make
    /// room for it.
    pub fn admit(&self) -> (PreAuthSlot, bool) {
        let (tx, rx) = oneshot::channel();
        let mut s = lock(&self.state);
        let cut = s.waiting.len() >= self.slots && s.waiting.pop_first().is_some();
        let id = s.next;
        s.next += 1;
        s.waiting.insert(id, tx);
        drop(s);
        (
            PreAuthSlot {
                id,
                state: self.state.clone(),
                cut: rx,
            },
            cut,
        )
    }

    /// Connections waiting now.
    pub fn waiting(&self) -> usize {
        lock(&self.state).waiting.len()
    }
}

impl PreAuthSlot {
    /// Runs `fut` in this slot: its output, or `None` if a newer connection took the slot first
    /// (then `fut` is dropped). The slot is freed either way.
    pub async fn run<F: Future>(mut self, fut: F) -> Option<F::Output> {
        tokio::select! {
            biased;
            out = fut => Some(out),
            _ = &mut self.cut => None,
        }
    }
}

impl Drop for PreAuthSlot {
    fn drop(&mut self) {
        lock(&self.state).waiting.remove(&self.id);
    }
}

/// Lets one log line through per period; see the module doc.
pub struct LogThrottle {
    period: Duration,
    start: Instant,
    /// Milliseconds since `start` at which the next line may go out (0: at once).
    next_ms: AtomicU64,
    held: AtomicU64,
}

impl LogThrottle {
    pub fn new(period: Duration) -> LogThrottle {
        LogThrottle {
            period,
            start: Instant::now(),
            next_ms: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a line may be logged now, `n` being how many were held back since the
    /// last one; `None` when this one is to be held back (it is counted).
    pub fn allow(&self) -> Option<u64> {
        let now = self.start.elapsed().as_millis() as u64;
        let next = self.next_ms.load(Ordering::Relaxed);
        let period = self.period.as_millis() as u64;
        if now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now + period.max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.held.swap(0, Ordering::Relaxed));
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_waiting_connection_gives_way() {
        let p = PreAuth::new(2);
        let (a, cut) = p.admit();
        assert!(!cut);
        let (b, cut) = p.admit();
        assert!(!cut);
        assert_eq!(p.waiting(), 2);
        // A third pushes out the first: its future ends at once with `None`.
        let (c, cut) = p.admit();
        assert!(cut);
        assert_eq!(p.waiting(), 2);
        assert_eq!(a.run(std::future::pending::<()>()).await, None);
        // The others still run to completion, and free their slots.
        assert_eq!(b.run(async { 7 }).await, Some(7));
        assert_eq!(p.waiting(), 1);
        drop(c);
        assert_eq!(p.waiting(), 0);
        let (_d, cut) = p.admit();
        assert!(!cut, "freed slots are reused without cutting anyone");
    }

    #[test]
    fn throttle_lets_one_line_through_per_period_and_counts_the_rest() {
        let t = LogThrottle::new(Duration::from_millis(200));
        assert_eq!(t.allow(), Some(0));
        for _ in 0..5 {
            assert_eq!(t.allow(), None);
        }
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(t.allow(), Some(5));
        assert_eq!(t.allow(), None);
    }
}
