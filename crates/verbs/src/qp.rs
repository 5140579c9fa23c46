//! RC queue pairs: creation (RESET -> INIT), connection from the peer's [`QpEndpoint`]
//! (INIT -> RTR -> RTS), posting, error state and teardown.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::io;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::cq::{CompletionQueue, InFlight, Opcode, WrId};
use crate::device::{GidEntry, Mtu};
use crate::endpoint::QpEndpoint;
use crate::error::{Error, PostError, Result};
use crate::mr::{Access, HeldSlice, MrBuf, ProtectionDomain, RemoteBuf};
use crate::sys::{self, Verbs};

static NEXT_QP_ID: AtomicU64 = AtomicU64::new(1);

/// Work queue sizes of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
        }
    }
}

/// Transport parameters for the INIT -> RTR -> RTS transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Local ACK timeout exponent: 4.096 us * 2^timeout (14: about 67 ms).
    pub timeout: u8,
    /// Transport retries before a request fails with `RetryExceeded` (0..=7).
    pub retry_cnt: u8,
    /// Retries after "receiver not ready" (7 = forever; Quarry's credits avoid RNR, so finite).
    pub rnr_retry: u8,
    /// RNR NAK timer advertised to the peer (12: 0.64 ms).
    pub min_rnr_timer: u8,
    /// Outstanding RDMA READs, both directions (clamped to the device's limits).
    pub max_rd_atomic: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub service_level: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            hop_limit: 64,
            traffic_class: 0,
            service_level: 0,
        }
    }
}

/// QP state (`ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    ReadyToReceive,
    ReadyToSend,
    SendQueueDrained,
    SendQueueError,
    Error,
    Unknown(u32),
}

impl QpState {
    fn from_raw(v: u32) -> QpState {
        use sys::{
            IBV_QPS_ERR, IBV_QPS_INIT, IBV_QPS_RESET, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD,
            IBV_QPS_SQE,
        };
        match v {
            IBV_QPS_RESET => QpState::Reset,
            IBV_QPS_INIT => QpState::Init,
            IBV_QPS_RTR => QpState::ReadyToReceive,
            IBV_QPS_RTS => QpState::ReadyToSend,
            IBV_QPS_SQD => QpState::SendQueueDrained,
            IBV_QPS_SQE => QpState::SendQueueError,
            IBV_QPS_ERR => QpState::Error,
            o => QpState::Unknown(o),
        }
    }
}

pub(crate) struct QpInner {
    id: u64,
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    qp: *mut sys::ibv_qp,
    port: u8,
    gid_index: u8,
    local: QpEndpoint,
    remote: OnceLock<QpEndpoint>,
    in_flight: Arc<AtomicUsize>,
}

// SAFETY: QP handles are usable from any thread (posting and modifying are thread-safe verbs);
// the QP is destroyed only in Drop, once no handle is left.
unsafe impl Send for QpInner {}
// SAFETY: see Send.
unsafe impl Sync for QpInner {}

impl Drop for QpInner {
    fn drop(&mut self) {
        // Error first, so the device stops processing, then destroy: after ibv_destroy_qp returns
        // the device no longer touches the QP's work requests, and only then are the buffers still
        // in the in-flight tables released.
        let v = self.pd.context().v();
        let _ = modify_state(v, self.qp, sys::IBV_QPS_ERR);
        // SAFETY: the QP came from ibv_create_qp and is destroyed once, here.
        let rc = unsafe { (v.destroy_qp)(self.qp) };
        if rc != 0 {
            tracing::error!(
                qpn = self.local.qpn,
                "ibv_destroy_qp failed ({}): keeping its posted buffers forever",
                io::Error::from_raw_os_error(rc)
            );
            return;
        }
        let id = self.id;
        let mut released = 0;
        for cq in [&self.send_cq, &self.recv_cq] {
            let mut table = cq.table();
            let before = table.len();
            table.retain(|_, e| e.qp_id != id);
            released += before - table.len();
        }
        if released > 0 {
            tracing::debug!(
                qpn = self.local.qpn,
                released,
                "QP destroyed with requests in flight"
            );
        }
    }
}

impl QpInner {
    #[allow(clippy::too_many_arguments)]
    fn post(
        &self,
        opcode: Opcode,
        wr_opcode: u32,
        buf: Option<MrBuf>,
        held: Option<HeldSlice>,
        len: usize,
        remote: Option<RemoteBuf>,
        imm: Option<u32>,
    ) -> Result<WrId, PostError> {
        let check = || -> Result<u32> {
            let len32 = u32::try_from(len)
                .map_err(|_| Error::InvalidArgument(format!("length {len} exceeds 4 GiB")))?;
            if let Some(h) = &held {
                if !h.pd().same(&self.pd) {
                    return Err(Error::ForeignRegion);
                }
                if len > h.len() {
                    return Err(Error::InvalidArgument(format!(
                        "length {len} exceeds the held slice's {} bytes",
                        h.len()
                    )));
                }
            } else if let Some(b) = &buf {
                if !b.pd().same(&self.pd) {
                    return Err(Error::ForeignRegion);
                }
                if len > b.len() {
                    return Err(Error::InvalidArgument(format!(
                        "length {len} exceeds the buffer's {} bytes",
                        b.len()
                    )));
                }
                if opcode == Opcode::RdmaRead && !b.access().contains(Access::LOCAL_WRITE) {
                    return Err(Error::InvalidArgument(
                        "an RDMA READ destination needs Access::LOCAL_WRITE".into(),
                    ));
                }
            } else if len > 0 {
                return Err(Error::InvalidArgument(
                    "a non-empty request needs a buffer".into(),
                ));
            }
            if let Some(r) = &remote {
                if len as u64 > r.len {
                    return Err(Error::InvalidArgument(format!(
                        "length {len} exceeds the remote buffer's {} bytes",
                        r.len
                    )));
                }
            }
            Ok(len32)
        };
        let len32 = match check() {
            Ok(l) => l,
            Err(e) => return Err(PostError::new(e, buf)),
        };
        let mut sge = match (&buf, &held, len32) {
            (_, Some(h), l) if l > 0 => Some(h.sge(l)),
            (Some(b), _, l) if l > 0 => Some(b.sge(l)),
            _ => None,
        };
        let id = WrId::next();
        self.track(&self.send_cq, id, opcode, buf, held)?;

        // SAFETY: ibv_send_wr is plain data (integers, raw pointers, unions of those): all-zero
        // is a valid value.
        let mut wr: sys::ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
        wr.wr_id = id.0;
        wr.next = ptr::null_mut();
        if let Some(sge) = sge.as_mut() {
            wr.sg_list = sge;
            wr.num_sge = 1;
        }
        wr.opcode = wr_opcode;
        wr.send_flags = sys::IBV_SEND_SIGNALED;
        if let Some(imm) = imm {
            wr.imm.imm_data = imm.to_be();
        }
        if let Some(r) = remote {
            wr.wr.rdma = sys::ibv_send_wr_rdma {
                remote_addr: r.addr,
                rkey: r.rkey,
            };
        }
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP is alive; `wr` and `sge` live until the call returns (the provider copies
        // them into the send queue). The buffer the SGE points into is owned by the in-flight table
        // from before the post until its completion is polled (or the QP is destroyed), so the
        // device never touches freed or otherwise-borrowed memory. A held slice is in the table
        // the same way: its owner keeps the bytes alive and unchanged, its region handle keeps
        // them registered, and the device only reads them.
        let rc = unsafe { sys::post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            let buf = self.untrack(&self.send_cq, id);
            return Err(PostError::new(Error::errno("ibv_post_send", rc), buf));
        }
        Ok(id)
    }

    fn post_recv(&self, buf: Option<MrBuf>) -> Result<WrId, PostError> {
        let mut sge = None;
        if let Some(b) = &buf {
            if !b.pd().same(&self.pd) {
                return Err(PostError::new(Error::ForeignRegion, buf));
            }
            if !b.access().contains(Access::LOCAL_WRITE) {
                return Err(PostError::new(
                    Error::InvalidArgument("a receive buffer needs Access::LOCAL_WRITE".into()),
                    buf,
                ));
            }
            let Ok(len) = u32::try_from(b.len()) else {
                return Err(PostError::new(
                    Error::InvalidArgument("receive buffer exceeds 4 GiB".into()),
                    buf,
                ));
            };
            if len > 0 {
                sge = Some(b.sge(len));
            }
        }
        let id = WrId::next();
        self.track(&self.recv_cq, id, Opcode::Recv, buf, None)?;
        // SAFETY: ibv_recv_wr is plain data; all-zero is valid.
        let mut wr: sys::ibv_recv_wr = unsafe { MaybeUninit::zeroed().assume_init() };
        wr.wr_id = id.0;
        if let Some(sge) = sge.as_mut() {
            wr.sg_list = sge;
            wr.num_sge = 1;
        }
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: as in `post`: `wr`/`sge` outlive the call, the buffer is owned by the in-flight
        // table until the completion is polled or the QP destroyed.
        let rc = unsafe { sys::post_recv(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            let buf = self.untrack(&self.recv_cq, id);
            return Err(PostError::new(Error::errno("ibv_post_recv", rc), buf));
        }
        Ok(id)
    }

    /// Puts a request in its CQ's in-flight table, unless the CQ could overflow: every request
    /// produces one completion, and a CQ with more completions than entries breaks (the device
    /// puts it and its QPs in error), so no more requests than entries are ever in flight.
    fn track(
        &self,
        cq: &CompletionQueue,
        id: WrId,
        opcode: Opcode,
        buf: Option<MrBuf>,
        held: Option<HeldSlice>,
    ) -> Result<(), PostError> {
        let mut table = cq.table();
        if table.len() >= cq.capacity() as usize {
            return Err(PostError::new(
                Error::CqFull {
                    capacity: cq.capacity(),
                },
                buf,
            ));
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        table.insert(
            id.0,
            InFlight {
                qp_id: self.id,
                opcode,
                buf,
                held,
                counter: self.in_flight.clone(),
            },
        );
        Ok(())
    }

    fn untrack(&self, cq: &CompletionQueue, id: WrId) -> Option<MrBuf> {
        let entry = cq.table().remove(&id.0)?;
        entry.counter.fetch_sub(1, Ordering::AcqRel);
        entry.buf
    }

    fn state(&self) -> Result<QpState> {
        // SAFETY: both structs are plain data; zero is valid.
        let mut attr: sys::ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: as above.
        let mut init: sys::ibv_qp_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: the QP is alive; both out-pointers are valid for the call.
        let rc = unsafe {
            (self.pd.context().v().query_qp)(self.qp, &mut attr, sys::IBV_QP_STATE, &mut init)
        };
        if rc != 0 {
            return Err(Error::errno("ibv_query_qp", rc));
        }
        Ok(QpState::from_raw(attr.qp_state))
    }
}

/// RDMA WRITE, or WRITE WITH IMMEDIATE when there is an immediate.
fn write_opcode(imm: Option<u32>) -> u32 {
    if imm.is_some() {
        sys::IBV_WR_RDMA_WRITE_WITH_IMM
    } else {
        sys::IBV_WR_RDMA_WRITE
    }
}

fn modify_state(v: &Verbs, qp: *mut sys::ibv_qp, state: u32) -> Result<()> {
    // SAFETY: plain data; zero is valid.
    let mut attr: sys::ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
    attr.qp_state = state;
    modify(v, qp, &mut attr, sys::IBV_QP_STATE, "ibv_modify_qp")
}

fn modify(
    v: &Verbs,
    qp: *mut sys::ibv_qp,
    attr: &mut sys::ibv_qp_attr,
    mask: std::os::raw::c_int,
    op: &'static str,
) -> Result<()> {
    // SAFETY: callers pass a live QP; `attr` is valid for the call.
    let rc = unsafe { (v.modify_qp)(qp, attr, mask) };
    if rc != 0 {
        return Err(Error::errno(op, rc));
    }
    Ok(())
}

fn random_psn(id: u64) -> u32 {
    let h = RandomState::new().hash_one((id, std::time::SystemTime::now()));
    (h as u32) & 0x00ff_ffff
}

impl ProtectionDomain {
    /// Creates an RC QP on `port`, using the GID `gid` (see
    /// [`crate::Context::select_roce_v2_gid`]) as its source address, and moves it to INIT.
    /// Receives can be posted right away; [`PreparedQp::connect`] then makes it usable.
    pub fn create_rc_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        port: u8,
        gid: &GidEntry,
        caps: QpCaps,
    ) -> Result<PreparedQp> {
        let ctx = self.context();
        for cq in [send_cq, recv_cq] {
            if !Arc::ptr_eq(&cq.context().inner, &ctx.inner) {
                return Err(Error::InvalidArgument(
                    "the CQ belongs to another device context than the PD".into(),
                ));
            }
        }
        if gid.port != port {
            return Err(Error::InvalidArgument(format!(
                "GID index {} is of port {}, not {port}",
                gid.index, gid.port
            )));
        }
        let gid_index = u8::try_from(gid.index)
            .map_err(|_| Error::InvalidArgument(format!("GID index {} > 255", gid.index)))?;
        let port_attr = ctx.active_port(port)?;
        let max_wr = ctx.caps().max_qp_wr;
        if caps.max_send_wr == 0
            || caps.max_recv_wr == 0
            || (max_wr > 0 && caps.max_send_wr.max(caps.max_recv_wr) > max_wr)
        {
            return Err(Error::InvalidArgument(format!(
                "QP sizes {}/{} (device allows 1..={max_wr})",
                caps.max_send_wr, caps.max_recv_wr
            )));
        }
        // SAFETY: plain data; zero is valid.
        let mut init: sys::ibv_qp_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        init.send_cq = send_cq.ptr();
        init.recv_cq = recv_cq.ptr();
        init.srq = ptr::null_mut();
        init.cap.max_send_wr = caps.max_send_wr;
        init.cap.max_recv_wr = caps.max_recv_wr;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.qp_type = sys::IBV_QPT_RC;
        init.sq_sig_all = 1;
        // SAFETY: PD and CQs are alive (the QP keeps Arcs on all three); `init` is valid.
        let qp = unsafe { (ctx.v().create_qp)(self.ptr(), &mut init) };
        if qp.is_null() {
            return Err(Error::last_os("ibv_create_qp"));
        }
        // SAFETY: a freshly created, valid QP.
        let qpn = unsafe { (*qp).qp_num };
        let id = NEXT_QP_ID.fetch_add(1, Ordering::Relaxed);
        let inner = QpInner {
            id,
            pd: self.clone(),
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            qp,
            port,
            gid_index,
            local: QpEndpoint {
                qpn,
                psn: random_psn(id),
                gid: gid.gid,
                lid: port_attr.lid,
                mtu: port_attr.active_mtu,
            },
            remote: OnceLock::new(),
            in_flight: Arc::new(AtomicUsize::new(0)),
        };
        // From here on, `inner` destroys the QP if anything fails.
        // SAFETY: plain data; zero is valid.
        let mut attr: sys::ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        attr.qp_state = sys::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = port;
        attr.qp_access_flags =
            (Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ).bits();
        use sys as M;
        modify(
            ctx.v(),
            qp,
            &mut attr,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "ibv_modify_qp(RESET->INIT)",
        )?;
        Ok(PreparedQp {
            inner: Arc::new(inner),
        })
    }
}

/// A QP in INIT: it can take receives and tell its [`QpEndpoint`] to the peer, not send yet.
pub struct PreparedQp {
    inner: Arc<QpInner>,
}

impl fmt::Debug for PreparedQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedQp")
            .field("local", &self.inner.local)
            .finish()
    }
}

impl PreparedQp {
    /// What the peer needs to connect to this QP.
    pub fn endpoint(&self) -> QpEndpoint {
        self.inner.local
    }

    /// Buffers posted on this QP must come from this PD.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// Posts a receive before connecting (so the peer's first SEND finds one).
    pub fn post_recv(&self, buf: MrBuf) -> Result<WrId, PostError> {
        self.inner.post_recv(Some(buf))
    }

    /// A receive without a buffer, for an RDMA WRITE WITH IMMEDIATE (its data goes elsewhere).
    pub fn post_recv_empty(&self) -> Result<WrId, PostError> {
        self.inner.post_recv(None)
    }

    /// INIT -> RTR -> RTS against the peer's endpoint. The path MTU is the smaller of both
    /// sides' MTUs. On error the QP is destroyed (posted receives are released).
    pub fn connect(self, remote: &QpEndpoint, opts: &ConnectOptions) -> Result<QueuePair> {
        let inner = &self.inner;
        let caps = inner.pd.context().caps();
        let path_mtu: Mtu = inner.local.mtu.min(remote.mtu);
        use sys as M;
        let v = inner.pd.context().v();

        // SAFETY: plain data; zero is valid.
        let mut attr: sys::ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        attr.qp_state = sys::IBV_QPS_RTR;
        attr.path_mtu = u32::from(path_mtu.code());
        attr.dest_qp_num = remote.qpn;
        attr.rq_psn = remote.psn;
        attr.max_dest_rd_atomic = opts.max_rd_atomic.min(caps.max_qp_rd_atom).max(1);
        attr.min_rnr_timer = opts.min_rnr_timer;
        attr.ah_attr.dlid = remote.lid;
        attr.ah_attr.sl = opts.service_level;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = inner.port;
        if !remote.gid.is_zero() {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = remote.gid.to_raw();
            attr.ah_attr.grh.sgid_index = inner.gid_index;
            attr.ah_attr.grh.hop_limit = opts.hop_limit;
            attr.ah_attr.grh.traffic_class = opts.traffic_class;
            attr.ah_attr.grh.flow_label = 0;
        }
        modify(
            v,
            inner.qp,
            &mut attr,
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER,
            "ibv_modify_qp(INIT->RTR)",
        )?;

        // SAFETY: plain data; zero is valid.
        let mut attr: sys::ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        attr.qp_state = sys::IBV_QPS_RTS;
        attr.timeout = opts.timeout;
        attr.retry_cnt = opts.retry_cnt.min(7);
        attr.rnr_retry = opts.rnr_retry.min(7);
        attr.sq_psn = inner.local.psn;
        attr.max_rd_atomic = opts.max_rd_atomic.min(caps.max_qp_init_rd_atom).max(1);
        modify(
            v,
            inner.qp,
            &mut attr,
            M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
            "ibv_modify_qp(RTR->RTS)",
        )?;

        let _ = inner.remote.set(*remote);
        tracing::debug!(local = %inner.local, remote = %remote, mtu = path_mtu.bytes(), "RC QP connected");
        Ok(QueuePair { inner: self.inner })
    }
}

/// A connected RC QP (RTS). Cheap to clone; posting is thread-safe. Each post takes its buffer by
/// value; the [`crate::Completion`] polled from the CQ gives it back (see the crate doc).
#[derive(Clone)]
pub struct QueuePair {
    inner: Arc<QpInner>,
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("local", &self.inner.local)
            .field("remote", &self.inner.remote.get())
            .finish()
    }
}

impl QueuePair {
    pub fn qpn(&self) -> u32 {
        self.inner.local.qpn
    }

    pub fn endpoint(&self) -> QpEndpoint {
        self.inner.local
    }

    pub fn remote_endpoint(&self) -> Option<QpEndpoint> {
        self.inner.remote.get().copied()
    }

    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    pub fn send_cq(&self) -> &CompletionQueue {
        &self.inner.send_cq
    }

    pub fn recv_cq(&self) -> &CompletionQueue {
        &self.inner.recv_cq
    }

    /// Requests of this QP (sends and receives) whose completion was not polled yet.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    pub fn state(&self) -> Result<QpState> {
        self.inner.state()
    }

    /// Moves the QP to the error state: every outstanding request completes with a flush error
    /// (and hands its buffer back) when its CQ is polled. Used to cancel everything in flight.
    pub fn set_error(&self) -> Result<()> {
        modify_state(self.inner.pd.context().v(), self.inner.qp, sys::IBV_QPS_ERR)
    }

    /// SEND of the first `len` bytes of `buf` (with immediate data if `imm`).
    pub fn post_send(&self, buf: MrBuf, len: usize, imm: Option<u32>) -> Result<WrId, PostError> {
        let op = if imm.is_some() {
            sys::IBV_WR_SEND_WITH_IMM
        } else {
            sys::IBV_WR_SEND
        };
        self.inner
            .post(Opcode::Send, op, Some(buf), None, len, None, imm)
    }

    /// RDMA WRITE of the first `len` bytes of `buf` to `remote`; with `imm`, an RDMA WRITE WITH
    /// IMMEDIATE, which consumes a receive at the peer and tells it the data is there.
    pub fn post_write(
        &self,
        buf: MrBuf,
        len: usize,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Result<WrId, PostError> {
        let op = write_opcode(imm);
        self.inner.post(
            Opcode::RdmaWrite,
            op,
            Some(buf),
            None,
            len,
            Some(remote),
            imm,
        )
    }

    /// RDMA WRITE of the first `len` bytes of a held slice to `remote` (with `imm`, WITH
    /// IMMEDIATE): bytes already in registered memory sent without moving their buffer. The
    /// slice's owner and region stay in the in-flight table until the completion, which hands
    /// back no buffer. If the post fails, the slice is dropped with the error.
    pub fn post_write_held(
        &self,
        src: HeldSlice,
        len: usize,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Result<WrId, PostError> {
        let op = write_opcode(imm);
        self.inner.post(
            Opcode::RdmaWrite,
            op,
            None,
            Some(src),
            len,
            Some(remote),
            imm,
        )
    }

    /// RDMA READ of `len` bytes from `remote` into the start of `buf` (which needs LOCAL_WRITE).
    pub fn post_read(&self, buf: MrBuf, len: usize, remote: RemoteBuf) -> Result<WrId, PostError> {
        self.inner.post(
            Opcode::RdmaRead,
            sys::IBV_WR_RDMA_READ,
            Some(buf),
            None,
            len,
            Some(remote),
            None,
        )
    }

    /// Posts a receive into `buf` (which needs LOCAL_WRITE).
    pub fn post_recv(&self, buf: MrBuf) -> Result<WrId, PostError> {
        self.inner.post_recv(Some(buf))
    }

    /// A receive without a buffer, for an RDMA WRITE WITH IMMEDIATE.
    pub fn post_recv_empty(&self) -> Result<WrId, PostError> {
        self.inner.post_recv(None)
    }
}
