//! Completion queues with a completion channel, the in-flight table that owns posted buffers,
//! and completions.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fmt;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::Context;
use crate::error::{Error, Result};
use crate::mr::MrBuf;
use crate::sys;

/// Identifies one posted work request; unique in the process, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WrId(pub u64);

static NEXT_WR_ID: AtomicU64 = AtomicU64::new(1);

impl WrId {
    pub(crate) fn next() -> WrId {
        WrId(NEXT_WR_ID.fetch_add(1, Ordering::Relaxed))
    }
}

/// What a work request was (or, for a receive, what arrived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Send,
    RdmaWrite,
    RdmaRead,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by an RDMA WRITE WITH IMMEDIATE (the data went to the peer's chosen
    /// address, not to the receive buffer).
    RecvRdmaWithImm,
    Other(u32),
}

impl Opcode {
    fn from_wc(v: u32) -> Opcode {
        use sys::{
            IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM,
            IBV_WC_SEND,
        };
        match v {
            IBV_WC_SEND => Opcode::Send,
            IBV_WC_RDMA_WRITE => Opcode::RdmaWrite,
            IBV_WC_RDMA_READ => Opcode::RdmaRead,
            IBV_WC_RECV => Opcode::Recv,
            IBV_WC_RECV_RDMA_WITH_IMM => Opcode::RecvRdmaWithImm,
            o => Opcode::Other(o),
        }
    }
}

/// Completion status (`ibv_wc_status`) other than success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    LocalLength,
    LocalQpOperation,
    LocalProtection,
    /// Flushed: the QP went to the error state before this request was processed.
    Flushed,
    BadResponse,
    LocalAccess,
    RemoteInvalidRequest,
    RemoteAccess,
    RemoteOperation,
    RetryExceeded,
    RnrRetryExceeded,
    RemoteAbort,
    Fatal,
    ResponseTimeout,
    General,
    Other(u32),
}

impl WcStatus {
    fn from_raw(v: u32) -> WcStatus {
        use sys::{
            IBV_WC_BAD_RESP_ERR, IBV_WC_FATAL_ERR, IBV_WC_GENERAL_ERR, IBV_WC_LOC_ACCESS_ERR,
            IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_PROT_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_REM_ABORT_ERR,
            IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_OP_ERR,
            IBV_WC_RESP_TIMEOUT_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR,
            IBV_WC_WR_FLUSH_ERR,
        };
        match v {
            IBV_WC_LOC_LEN_ERR => WcStatus::LocalLength,
            IBV_WC_LOC_QP_OP_ERR => WcStatus::LocalQpOperation,
            IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtection,
            IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
            IBV_WC_BAD_RESP_ERR => WcStatus::BadResponse,
            IBV_WC_LOC_ACCESS_ERR => WcStatus::LocalAccess,
            IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
            IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccess,
            IBV_WC_REM_OP_ERR => WcStatus::RemoteOperation,
            IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExceeded,
            IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
            IBV_WC_REM_ABORT_ERR => WcStatus::RemoteAbort,
            IBV_WC_FATAL_ERR => WcStatus::Fatal,
            IBV_WC_RESP_TIMEOUT_ERR => WcStatus::ResponseTimeout,
            IBV_WC_GENERAL_ERR => WcStatus::General,
            o => WcStatus::Other(o),
        }
    }
}

/// A work request that completed with an error. Its QP is in the error state afterwards.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{opcode:?} on QP {qp_num:#x} failed: {text} (status {raw_status}, vendor error {vendor_err:#x})")]
pub struct CompletionError {
    pub status: WcStatus,
    pub raw_status: u32,
    pub opcode: Opcode,
    pub qp_num: u32,
    pub vendor_err: u32,
    /// libibverbs' text for the status.
    pub text: String,
}

impl CompletionError {
    /// A flush only says the QP was already in error; the cause is in an earlier completion.
    pub fn is_flush(&self) -> bool {
        self.status == WcStatus::Flushed
    }
}

/// One polled completion. Owns the buffer of the request it completes, successful or not.
pub struct Completion {
    pub wr_id: WrId,
    pub qp_num: u32,
    /// For a failed request, what was posted (the device's opcode is undefined then).
    pub opcode: Opcode,
    pub status: Result<(), CompletionError>,
    /// Bytes received (receives) or read; 0 for a failed request.
    pub byte_len: u32,
    /// Immediate data (host order) of a SEND / RDMA WRITE WITH IMMEDIATE that consumed a receive.
    pub imm: Option<u32>,
    /// The buffer the request was posted with, handed back.
    pub buf: Option<MrBuf>,
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("wr_id", &self.wr_id)
            .field("qp_num", &format_args!("{:#x}", self.qp_num))
            .field("opcode", &self.opcode)
            .field("status", &self.status)
            .field("byte_len", &self.byte_len)
            .field("imm", &self.imm)
            .field("buf", &self.buf)
            .finish()
    }
}

impl Completion {
    pub fn is_ok(&self) -> bool {
        self.status.is_ok()
    }

    /// The status as this crate's error type.
    pub fn result(&self) -> Result<()> {
        self.status.clone().map_err(Error::Completion)
    }
}

/// A posted request, until its completion is polled.
pub(crate) struct InFlight {
    /// Identity of the QP object (not its number, which the device may reuse).
    pub(crate) qp_id: u64,
    pub(crate) opcode: Opcode,
    pub(crate) buf: Option<MrBuf>,
    /// Held bytes a request reads from (see [`crate::HeldSlice`]): never read, only kept until
    /// the entry is dropped (at the completion, or when the QP is destroyed).
    #[allow(dead_code)]
    pub(crate) held: Option<crate::mr::HeldSlice>,
    /// The QP's in-flight counter.
    pub(crate) counter: Arc<AtomicUsize>,
}

pub(crate) struct CqInner {
    ctx: Context,
    channel: *mut sys::ibv_comp_channel,
    cq: *mut sys::ibv_cq,
    capacity: u32,
    table: Mutex<HashMap<u64, InFlight>>,
}

// SAFETY: CQ and channel are verbs handles usable from any thread (ibv_poll_cq and friends are
// thread-safe); the table is behind a Mutex. They are destroyed only in Drop, when no QP (each
// holds an Arc) is left.
unsafe impl Send for CqInner {}
// SAFETY: see Send.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: no QP uses the CQ any more (each holds an Arc); every event taken from the
        // channel was acknowledged in `consume_events`, so ibv_destroy_cq cannot block.
        let rc = unsafe { (self.ctx.v().destroy_cq)(self.cq) };
        if rc != 0 {
            tracing::warn!(
                "ibv_destroy_cq failed: {}",
                io::Error::from_raw_os_error(rc)
            );
            // Keep the channel (the CQ still refers to it) and the table's buffers: leak both.
            if let Ok(mut t) = self.table.lock() {
                std::mem::forget(std::mem::take(&mut *t));
            }
            return;
        }
        // SAFETY: the only CQ on this channel was just destroyed.
        let rc = unsafe { (self.ctx.v().destroy_comp_channel)(self.channel) };
        if rc != 0 {
            tracing::warn!(
                "ibv_destroy_comp_channel failed: {}",
                io::Error::last_os_error()
            );
        }
        // Table entries left here belong to QPs that were destroyed (QpInner::drop purges them
        // already), so dropping their buffers is safe.
    }
}

/// A completion queue with its own completion channel. Cheap to clone.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("capacity", &self.inner.capacity)
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

impl Context {
    /// A CQ of at least `capacity` entries (at most the device's `max_cqe`), with a completion
    /// channel whose fd is non-blocking.
    pub fn create_cq(&self, capacity: u32) -> Result<CompletionQueue> {
        let max = self.caps().max_cqe;
        if capacity == 0 || (max > 0 && capacity > max) {
            return Err(Error::InvalidArgument(format!(
                "CQ capacity {capacity} (device allows 1..={max})"
            )));
        }
        let v = self.v();
        // SAFETY: the context is open; the channel is destroyed in CqInner::drop or below.
        let channel = unsafe { (v.create_comp_channel)(self.ptr()) };
        if channel.is_null() {
            return Err(Error::last_os("ibv_create_comp_channel"));
        }
        // SAFETY: `channel` is valid; its fd is owned by the channel and stays open until the
        // channel is destroyed.
        let fd = unsafe { (*channel).fd };
        if let Err(e) = set_nonblocking(fd) {
            // SAFETY: created above, no CQ on it yet.
            unsafe { (v.destroy_comp_channel)(channel) };
            return Err(Error::Verbs {
                op: "fcntl(O_NONBLOCK) on the completion channel",
                source: e,
            });
        }
        let cqe = std::os::raw::c_int::try_from(capacity).unwrap_or(std::os::raw::c_int::MAX);
        // SAFETY: context and channel are valid; no CQ context pointer is used.
        let cq = unsafe { (v.create_cq)(self.ptr(), cqe, ptr::null_mut(), channel, 0) };
        if cq.is_null() {
            let err = Error::last_os("ibv_create_cq");
            // SAFETY: created above, no CQ on it.
            unsafe { (v.destroy_comp_channel)(channel) };
            return Err(err);
        }
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                ctx: self.clone(),
                channel,
                cq,
                capacity,
                table: Mutex::new(HashMap::new()),
            }),
        })
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own, with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

const POLL_BATCH: usize = 16;

impl CompletionQueue {
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    pub(crate) fn ptr(&self) -> *mut sys::ibv_cq {
        self.inner.cq
    }

    pub fn capacity(&self) -> u32 {
        self.inner.capacity
    }

    pub(crate) fn table(&self) -> MutexGuard<'_, HashMap<u64, InFlight>> {
        // A panic while holding the lock leaves a consistent map (single insert/remove calls).
        self.inner
            .table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Work requests posted to complete on this CQ whose completion was not polled yet.
    pub fn in_flight(&self) -> usize {
        self.table().len()
    }

    /// Polls up to `max` completions into `out` without blocking; returns how many were added.
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize> {
        let mut added = 0;
        while added < max {
            let want = (max - added).min(POLL_BATCH);
            let mut wcs: [MaybeUninit<sys::ibv_wc>; POLL_BATCH] =
                [const { MaybeUninit::uninit() }; POLL_BATCH];
            // SAFETY: the CQ is alive; `wcs` has room for `want` (<= POLL_BATCH) entries.
            let n = unsafe {
                sys::poll_cq(
                    self.ptr(),
                    want as i32,
                    wcs.as_mut_ptr().cast::<sys::ibv_wc>(),
                )
            };
            if n < 0 {
                return Err(Error::errno(
                    "ibv_poll_cq",
                    if -n > 0 { -n } else { libc::EIO },
                ));
            }
            let n = n as usize;
            let mut table = self.table();
            for wc in &wcs[..n] {
                // SAFETY: ibv_poll_cq initialized the first `n` entries.
                let wc = unsafe { wc.assume_init_ref() };
                let Some(entry) = table.remove(&wc.wr_id) else {
                    // A completion of a QP destroyed meanwhile (its entries were purged).
                    tracing::trace!(wr_id = wc.wr_id, "completion of a destroyed QP ignored");
                    continue;
                };
                entry.counter.fetch_sub(1, Ordering::AcqRel);
                out.push(completion(self.inner.ctx.v(), wc, entry));
                added += 1;
            }
            drop(table);
            if n < want {
                break;
            }
        }
        Ok(added)
    }

    /// Arms the CQ: the channel fd becomes readable at the next completion. Poll once more after
    /// arming: a completion that arrived before it does not fire the event.
    pub fn req_notify(&self) -> Result<()> {
        // SAFETY: the CQ is alive.
        let rc = unsafe { sys::req_notify_cq(self.ptr(), 0) };
        if rc != 0 {
            return Err(Error::errno("ibv_req_notify_cq", rc));
        }
        Ok(())
    }

    /// Reads and acknowledges every pending event of the channel without blocking; returns how
    /// many there were. Call it when the fd is readable, then poll and re-arm.
    pub fn consume_events(&self) -> Result<usize> {
        let mut n = 0;
        loop {
            let mut cq: *mut sys::ibv_cq = ptr::null_mut();
            let mut ctx: *mut std::os::raw::c_void = ptr::null_mut();
            // SAFETY: the channel is alive and non-blocking; both out-pointers are valid.
            let rc =
                unsafe { (self.inner.ctx.v().get_cq_event)(self.inner.channel, &mut cq, &mut ctx) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock {
                    return Ok(n);
                }
                return Err(Error::Verbs {
                    op: "ibv_get_cq_event",
                    source: e,
                });
            }
            // SAFETY: `cq` is the CQ the event was for (this channel serves only ours); each
            // event is acknowledged exactly once, which ibv_destroy_cq waits for.
            unsafe { (self.inner.ctx.v().ack_cq_events)(cq, 1) };
            n += 1;
        }
    }
}

impl AsRawFd for CompletionQueue {
    /// The completion channel's fd (non-blocking), for `tokio::io::unix::AsyncFd`.
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: the channel is alive as long as `self`.
        unsafe { (*self.inner.channel).fd }
    }
}

impl AsFd for CompletionQueue {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open until the channel is destroyed, which cannot happen while
        // `self` (an Arc on it) is borrowed.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

fn completion(v: &sys::Verbs, wc: &sys::ibv_wc, entry: InFlight) -> Completion {
    let ok = wc.status == sys::IBV_WC_SUCCESS;
    let status = if ok {
        Ok(())
    } else {
        // SAFETY: ibv_wc_status_str returns a static NUL-terminated string for any value.
        let text = unsafe { CStr::from_ptr((v.wc_status_str)(wc.status)) }
            .to_string_lossy()
            .into_owned();
        Err(CompletionError {
            status: WcStatus::from_raw(wc.status),
            raw_status: wc.status,
            opcode: entry.opcode,
            qp_num: wc.qp_num,
            vendor_err: wc.vendor_err,
            text,
        })
    };
    let with_imm = wc.wc_flags & sys::IBV_WC_WITH_IMM != 0;
    Completion {
        wr_id: WrId(wc.wr_id),
        qp_num: wc.qp_num,
        opcode: if ok {
            Opcode::from_wc(wc.opcode)
        } else {
            entry.opcode
        },
        byte_len: if ok { wc.byte_len } else { 0 },
        imm: if ok && with_imm {
            // SAFETY: with IBV_WC_WITH_IMM set, the union holds the immediate (network order).
            Some(u32::from_be(unsafe { wc.imm.imm_data }))
        } else {
            None
        },
        status,
        buf: entry.buf,
    }
}

#[cfg(feature = "tokio")]
pub use self::async_cq::AsyncCompletionQueue;

#[cfg(feature = "tokio")]
mod async_cq {
    use super::*;
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    /// A CQ whose channel fd is registered with tokio: [`AsyncCompletionQueue::next`] waits for
    /// completions without a polling thread. One per CQ; create it inside a tokio runtime.
    pub struct AsyncCompletionQueue {
        fd: AsyncFd<CompletionQueue>,
    }

    impl AsyncCompletionQueue {
        pub fn new(cq: CompletionQueue) -> Result<Self> {
            if tokio::runtime::Handle::try_current().is_err() {
                return Err(Error::InvalidArgument(
                    "AsyncCompletionQueue::new must be called inside a tokio runtime".into(),
                ));
            }
            // SAFETY: the fd is the completion channel's, owned by the CqInner that `cq` (moved
            // into the AsyncFd) keeps alive; it is closed only when the channel is destroyed, after
            // the last CompletionQueue handle, so it stays open and the same for the AsyncFd's
            // whole life, and `as_raw_fd` always returns it.
            let fd = unsafe { AsyncFd::register_with_interest(cq, Interest::READABLE) }.map_err(
                |e| Error::Verbs {
                    op: "registering the completion channel with tokio",
                    source: e.into_parts().1,
                },
            )?;
            Ok(AsyncCompletionQueue { fd })
        }

        pub fn cq(&self) -> &CompletionQueue {
            self.fd.get_ref()
        }

        /// Waits until at least one completion is there, then polls up to `max` into `out`.
        /// Cancel-safe: dropping the future loses no completion (they stay in the CQ) and frees
        /// no buffer (they stay in the in-flight table).
        pub async fn next(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize> {
            let cq = self.cq();
            loop {
                // Drain, arm, drain again: a completion between the first poll and arming
                // would not fire the channel.
                let n = cq.poll(out, max)?;
                if n > 0 {
                    return Ok(n);
                }
                cq.req_notify()?;
                let n = cq.poll(out, max)?;
                if n > 0 {
                    return Ok(n);
                }
                let mut guard = self.fd.readable().await.map_err(|source| Error::Verbs {
                    op: "waiting for the completion channel",
                    source,
                })?;
                // Consume every event; readiness is cleared only once the fd reads empty.
                let consumed = guard.try_io(|_| match cq.consume_events() {
                    Ok(_) => Err::<(), io::Error>(io::ErrorKind::WouldBlock.into()),
                    Err(Error::Verbs { source, .. }) => Err(source),
                    Err(other) => Err(io::Error::other(other.to_string())),
                });
                if let Ok(Err(source)) = consumed {
                    return Err(Error::Verbs {
                        op: "ibv_get_cq_event",
                        source,
                    });
                }
            }
        }
    }
}
