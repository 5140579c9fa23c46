//! Errors of this crate.

use std::io;
use std::net::IpAddr;

use crate::cq::CompletionError;
use crate::device::PortState;
use crate::endpoint::EndpointError;
use crate::mr::MrBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong with a verbs call. `NoDevice` is the normal "no RDMA here" case.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No RDMA device, or no RDMA support in the kernel: use TCP.
    #[error("no RDMA device: {reason}")]
    NoDevice { reason: String },
    /// libibverbs (rdma-core's verbs library, loaded at run time) is not installed, or too old:
    /// like `NoDevice`, use TCP. `library` is what was opened (`libibverbs.so.1`, or the file
    /// `QUARRY_LIBIBVERBS` names); `problem` says what is wrong with it.
    #[error("{library} {problem}")]
    NoLibrary { library: String, problem: String },
    /// Devices exist, but not the one asked for.
    #[error("RDMA device {name:?} not found (available: {})", available.join(", "))]
    DeviceNotFound {
        name: String,
        available: Vec<String>,
    },
    /// A verbs call failed; `source` carries the errno and its text.
    #[error("{op} failed: {source}")]
    Verbs {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("port {port} of {device} is {state}, not active")]
    PortNotActive {
        device: String,
        port: u8,
        state: PortState,
    },
    /// No usable RoCE v2 GID (or none with the wanted address) on the port.
    #[error("no RoCE v2 GID{} on {device} port {port} (RoCE v2 addresses there: {})",
        wanted.map(|a| format!(" for {a}")).unwrap_or_default(),
        if available.is_empty() { "none".to_string() } else { available.join(", ") })]
    NoRoceV2Gid {
        device: String,
        port: u8,
        wanted: Option<IpAddr>,
        available: Vec<String>,
    },
    /// RLIMIT_MEMLOCK does not allow pinning the memory to register.
    #[error("RLIMIT_MEMLOCK is {limit} bytes but {needed} bytes must be registered for RDMA: raise it (`ulimit -l unlimited`, LimitMEMLOCK=infinity in a systemd unit, --ulimit memlock=-1 for docker)")]
    MemlockTooSmall { needed: u64, limit: u64 },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// As many requests are in flight as the completion queue has entries: poll it first.
    #[error("completion queue full: {capacity} requests in flight; poll completions before posting more")]
    CqFull { capacity: u32 },
    /// A buffer was posted on a QP of another protection domain.
    #[error("the buffer's memory region belongs to another protection domain than the queue pair")]
    ForeignRegion,
    /// A work request completed with an error status (the QP is then in the error state).
    #[error(transparent)]
    Completion(#[from] CompletionError),
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
}

impl Error {
    /// `Verbs` error from the current `errno`.
    pub(crate) fn last_os(op: &'static str) -> Self {
        Error::Verbs {
            op,
            source: io::Error::last_os_error(),
        }
    }

    /// `Verbs` error from a returned errno value (verbs calls that return it instead of setting
    /// `errno`).
    pub(crate) fn errno(op: &'static str, errno: i32) -> Self {
        Error::Verbs {
            op,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// True for "no RDMA here" (no device, no kernel support, no libibverbs): the caller falls
    /// back to TCP.
    pub fn is_no_device(&self) -> bool {
        matches!(self, Error::NoDevice { .. } | Error::NoLibrary { .. })
    }

    /// True when libibverbs itself is missing or too old (see [`Error::NoLibrary`]).
    pub fn is_no_library(&self) -> bool {
        matches!(self, Error::NoLibrary { .. })
    }
}

/// A post that failed: the error and the buffer that was not posted, handed back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct PostError {
    #[source]
    pub error: Error,
    pub buf: Option<MrBuf>,
}

impl PostError {
    pub(crate) fn new(error: Error, buf: Option<MrBuf>) -> Self {
        PostError { error, buf }
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Self {
        e.error
    }
}
