//! File descriptors: the soft `RLIMIT_NOFILE` is raised to the hard limit at start-up, and the
//! connection limits are sized from what it allows, keeping a reserve for the drives (shard
//! files, metadata, temporary files), the runtime and, in a cluster, the internode connections.
//! Without this, idle sockets could take every descriptor below a soft limit of 1,024 while
//! `--max-connections` allowed 4,096, and drive opens then failed with EMFILE (a PUT answered
//! "quorum lost").

/// Descriptors kept for the process itself: runtime, listener, logs, stdio.
pub const RESERVE_BASE: u64 = 256;
/// Descriptors kept per local drive: files of the requests in flight, heals, the scanner.
pub const RESERVE_PER_DRIVE: u64 = 128;
/// Fewest S3 connections worth starting with.
pub const MIN_CONNECTIONS: u64 = 16;

/// The descriptor limits after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The soft limit in force now.
    pub soft: u64,
    /// The soft limit the process started with.
    pub was: u64,
    pub hard: u64,
}

/// Raises the soft limit on open descriptors to the hard limit (as far as the kernel allows:
/// `nr_open` may be lower than an unlimited hard limit).
pub fn raise() -> Limits {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let before = getrlimit(Resource::Nofile);
    let was = before.current.unwrap_or(u64::MAX);
    let hard = before.maximum.unwrap_or(u64::MAX);
    let mut soft = was;
    if was < hard {
        // An unlimited hard limit cannot be the soft one on Linux (EPERM above nr_open).
        let mut want = if hard == u64::MAX {
            std::fs::read_to_string("/proc/sys/fs/nr_open")
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(1 << 20)
        } else {
            hard
        };
        while want > was {
            let set = setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(want),
                    maximum: before.maximum,
                },
            );
            if set.is_ok() {
                soft = want;
                break;
            }
            want /= 2;
        }
    }
    Limits { soft, was, hard }
}

/// Descriptors to keep for everything but S3 connections: the base, `drives` local drives, and
/// `internode` (the internode server's connections and handshakes, the sniffer's slots, the
/// connections to peers).
pub fn reserve(drives: usize, internode: u64) -> u64 {
    RESERVE_BASE + RESERVE_PER_DRIVE * drives as u64 + internode
}

/// The S3 connection limit: `wanted`, or less when `soft` minus the reserve does not allow it;
/// an error when not even [`MIN_CONNECTIONS`] fit.
pub fn connection_limit(wanted: usize, soft: u64, reserve: u64) -> Result<usize, String> {
    let room = soft.saturating_sub(reserve);
    if room < MIN_CONNECTIONS {
        return Err(format!(
            "the open-file limit ({soft}) leaves {room} descriptors for connections once {reserve} are kept for the drives and the node itself; raise it (ulimit -n, LimitNOFILE= in a systemd unit) to at least {}",
            reserve + 1024
        ));
    }
    Ok(wanted.min(usize::try_from(room).unwrap_or(usize::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_get_what_the_reserve_leaves() {
        let r = reserve(4, 0);
        assert_eq!(r, 256 + 512);
        assert_eq!(connection_limit(4096, 1 << 20, r), Ok(4096));
        assert_eq!(connection_limit(4096, 1024, r), Ok(256));
        assert_eq!(connection_limit(100, 1024, r), Ok(100));
        let e = connection_limit(4096, 700, r).unwrap_err();
        assert!(e.contains("ulimit -n"), "{e}");
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let l = raise();
        assert!(l.soft >= l.was);
        if l.hard != u64::MAX {
            assert_eq!(l.soft, l.hard);
        }
        let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(now.current, Some(l.soft));
    }
}
