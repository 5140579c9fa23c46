//! RLIMIT_MEMLOCK: registered memory is pinned and counts against it.

use std::io;

use crate::error::{Error, Result};

/// The soft RLIMIT_MEMLOCK of this process in bytes; `None` when unlimited.
pub fn memlock_limit() -> io::Result<Option<u64>> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the duration of the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if lim.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(lim.rlim_cur)
    })
}

/// `Ok` when `needed` bytes can be registered under RLIMIT_MEMLOCK, else
/// [`Error::MemlockTooSmall`] saying how to raise it. Call it at start-up with the pool size.
pub fn check_memlock(needed: u64) -> Result<()> {
    let limit = memlock_limit().map_err(|source| Error::Verbs {
        op: "getrlimit(RLIMIT_MEMLOCK)",
        source,
    })?;
    match limit {
        Some(limit) if needed > limit => Err(Error::MemlockTooSmall { needed, limit }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_soft_limit(cur: libc::rlim_t) {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: valid out-pointer, then a valid in-pointer.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim), 0);
            lim.rlim_cur = cur.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim), 0);
        }
    }

    #[test]
    fn memlock_check_reports_a_small_limit() {
        // Lowering the soft limit is always allowed and affects only this process, where no
        // other unit test registers memory; it is restored below.
        let before = memlock_limit().unwrap();
        set_soft_limit(64 * 1024);
        assert_eq!(memlock_limit().unwrap(), Some(64 * 1024));
        check_memlock(64 * 1024).unwrap();
        let err = check_memlock(1 << 30).unwrap_err();
        set_soft_limit(before.unwrap_or(libc::RLIM_INFINITY));
        assert_eq!(memlock_limit().unwrap(), before);
        match &err {
            Error::MemlockTooSmall { needed, limit } => {
                assert_eq!((*needed, *limit), (1 << 30, 64 * 1024));
            }
            other => panic!("expected MemlockTooSmall, got {other}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("RLIMIT_MEMLOCK is 65536 bytes"), "{msg}");
        assert!(msg.contains("ulimit -l unlimited"), "{msg}");
    }
}
