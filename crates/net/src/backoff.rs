//! Back-off after failed connection set-ups, one [`PeerBackoff`] per peer: the control RPC
//! client, the TCP data plane and the verbs data plane all mark a peer down the same way.
//!
//! Each failure in a row doubles the delay before the next attempt, up to a cap, jittered to
//! 50–100 % so a cluster does not retry in lockstep; inside that delay callers fail at once with
//! the last error instead of waiting on a dead address. The first success clears it.
//!
//! A peer this process has never reached backs off at most [`NEVER_UP_MAX`]: when a cluster
//! starts (or restarts as a whole) every peer is unreachable until it listens, and a delay grown
//! to the cap there only makes requests fail for seconds after the peer is up (a clean-clone CI
//! run saw UploadPart answer 503 right after a whole-cluster restart for that reason).

use std::fmt::Display;
use std::time::{Duration, Instant};

use rand::Rng;

/// Delay before the next attempt after `failures` consecutive failures: `initial * 2^(failures-1)`,
/// capped at `max`, times `jitter` (0.5–1.0).
fn backoff(initial: Duration, max: Duration, failures: u32, jitter: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(30);
    let base = initial.saturating_mul(1u32 << exp).min(max);
    base.mul_f64(jitter.clamp(0.0, 1.0))
}

/// The longest delay for a peer never reached since this process started.
pub(crate) const NEVER_UP_MAX: Duration = Duration::from_secs(1);

/// Connection set-ups to one peer that failed in a row, and until when to fail fast.
#[derive(Debug, Default)]
pub(crate) struct PeerBackoff {
    failures: u32,
    down_until: Option<Instant>,
    last_error: String,
    /// Whether a set-up to this peer ever succeeded.
    ever_up: bool,
}

/// A peer inside its back-off delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Down<'a> {
    pub retry_in: Duration,
    pub failures: u32,
    pub last_error: &'a str,
}

impl PeerBackoff {
    /// Failed set-ups in a row.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// `Some` while attempts should fail fast (`now` is inside the delay).
    pub(crate) fn down(&self, now: Instant) -> Option<Down<'_>> {
        let until = self.down_until.filter(|&u| u > now)?;
        Some(Down {
            retry_in: until - now,
            failures: self.failures,
            last_error: &self.last_error,
        })
    }

    /// Records a failed set-up; returns the delay before the next attempt.
    pub(crate) fn failed(
        &mut self,
        initial: Duration,
        max: Duration,
        error: impl Display,
    ) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let max = if self.ever_up {
            max
        } else {
            max.min(NEVER_UP_MAX)
        };
        let delay = backoff(
            initial,
            max,
            self.failures,
            rand::thread_rng().gen_range(0.5..=1.0),
        );
        self.down_until = Some(Instant::now() + delay);
        self.last_error = error.to_string();
        delay
    }

    /// A set-up succeeded: attempts go ahead again, the count starts over.
    pub(crate) fn succeeded(&mut self) {
        *self = PeerBackoff {
            ever_up: true,
            ..PeerBackoff::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::{backoff, PeerBackoff, NEVER_UP_MAX};
    use std::time::{Duration, Instant};

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        let ms = Duration::from_millis;
        assert_eq!(backoff(ms(100), ms(10_000), 1, 1.0), ms(100));
        assert_eq!(backoff(ms(100), ms(10_000), 2, 1.0), ms(200));
        assert_eq!(backoff(ms(100), ms(10_000), 5, 1.0), ms(1600));
        assert_eq!(backoff(ms(100), ms(10_000), 9, 1.0), ms(10_000));
        assert_eq!(backoff(ms(100), ms(10_000), u32::MAX, 1.0), ms(10_000));
        assert_eq!(backoff(ms(100), ms(10_000), 1, 0.5), ms(50));
    }

    #[test]
    fn a_peer_never_reached_backs_off_at_most_a_second() {
        let ms = Duration::from_millis;
        let mut b = PeerBackoff::default();
        let starting: Vec<Duration> = (0..12)
            .map(|_| b.failed(ms(100), ms(60_000), "refused"))
            .collect();
        assert!(starting.iter().all(|d| *d <= NEVER_UP_MAX), "{starting:?}");
        assert!(starting[11] >= NEVER_UP_MAX / 2, "{starting:?}");
        // Once it was up, a peer that goes away backs off to the configured cap.
        b.succeeded();
        let gone: Vec<Duration> = (0..12)
            .map(|_| b.failed(ms(100), ms(60_000), "refused"))
            .collect();
        assert!(gone[11] >= ms(30_000), "{gone:?}");
        b.succeeded();
        assert!(b.failed(ms(100), ms(60_000), "refused") <= ms(100));
    }

    #[test]
    fn peer_is_down_inside_the_delay_and_up_after_a_success() {
        let ms = Duration::from_millis;
        let mut b = PeerBackoff::default();
        b.succeeded(); // a peer that was up once (one never reached: the test above)
        assert_eq!(b.down(Instant::now()), None);
        let d1 = b.failed(ms(1000), ms(60_000), "refused");
        assert!((ms(500)..=ms(1000)).contains(&d1), "{d1:?}");
        let down = b.down(Instant::now()).expect("down after a failure");
        assert_eq!((down.failures, down.last_error), (1, "refused"));
        assert!(down.retry_in <= d1);
        // Past the delay, attempts go ahead (the failures still count toward the next delay).
        assert_eq!(b.down(Instant::now() + d1 + ms(1)), None);
        let d2 = b.failed(ms(1000), ms(60_000), "reset");
        assert!((ms(1000)..=ms(2000)).contains(&d2), "{d2:?}");
        assert_eq!(b.down(Instant::now()).map(|d| d.last_error), Some("reset"));
        assert_eq!(b.failures(), 2);
        b.succeeded();
        assert_eq!((b.down(Instant::now()), b.failures()), (None, 0));
    }
}
