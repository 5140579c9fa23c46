//! Hand-written bindings of the part of libibverbs this crate uses, and the loader that resolves
//! libibverbs.so.1 at run time (dlopen), so that building Quarry needs no RDMA package and a
//! `quarry` binary starts on a host without rdma-core (it then uses TCP).
//!
//! Transcribed from rdma-core v44.0 (Debian bookworm's libibverbs-dev 44.0-2):
//! `/usr/include/infiniband/verbs.h` (structs, enums, the inline verbs) and the symbol versions
//! of `/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0` (`objdump -T`). Every struct here is
//! part of libibverbs' stable ABI (rdma-core only appends to them, and the QP/CQ/device structs
//! are fixed since IBVERBS_1.1). Structs that libibverbs allocates and this crate only reaches
//! through a pointer are transcribed up to the last field read here (`ibv_context` in full, for
//! its ops table; `ibv_device` stays opaque).
//!
//! The `abi_check` test below writes a C file of `_Static_assert`s of every size, field offset
//! and constant defined here, from the Rust side, and compiles it against the real header: a
//! transcription error fails the test (it runs in scripts/test, which installs libibverbs-dev for it and sets
//! `QUARRY_VERBS_ABI_CHECK=1` so that a missing header fails instead of skipping).
//!
//! Inline verbs: the header's `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and
//! `ibv_req_notify_cq` are `static inline` calls through `context->ops`; [`post_send`] and friends
//! do the same. `ibv_query_port` is a macro over an inline function that uses the extended
//! context's op when there is one and else calls the exported `ibv_query_port@IBVERBS_1.1` with
//! the full struct (zeroed) cast to the compat one, which fills the fields up to `flags` (all
//! this crate reads); [`Verbs::query_port`] is that second path. `ibv_query_gid_ex` and
//! `ibv_query_gid_table` are inline wrappers over the exported `_ibv_query_gid_ex` and
//! `_ibv_query_gid_table` (IBVERBS_1.11, rdma-core v32) with the entry size passed along.
//! `ibv_reg_mr` is a macro that calls the exported `ibv_reg_mr` when the access flags have no
//! optional bit (ours never do).

#![allow(non_camel_case_types)]

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use crate::error::{Error, Result};

// ---------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------

/// `struct ibv_device`: only handled by pointer.
#[repr(C)]
pub(crate) struct ibv_device {
    _opaque: [u8; 0],
}

/// `union ibv_gid`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ibv_gid {
    pub raw: [u8; 16],
    pub global: ibv_gid_global,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_gid_global {
    pub subnet_prefix: u64,
    pub interface_id: u64,
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: u32,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` (the compat struct `ibv_query_port@IBVERBS_1.1` fills is its prefix up
/// to `flags`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

pub(crate) type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub(crate) type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub(crate) type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub(crate) type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: the four inline verbs' entries are typed, the rest are placeholders
/// of pointer size (the C members are function pointers too).
#[repr(C)]
pub(crate) struct ibv_context_ops {
    pub _compat_query_device: *mut c_void,
    pub _compat_query_port: *mut c_void,
    pub _compat_alloc_pd: *mut c_void,
    pub _compat_dealloc_pd: *mut c_void,
    pub _compat_reg_mr: *mut c_void,
    pub _compat_rereg_mr: *mut c_void,
    pub _compat_dereg_mr: *mut c_void,
    pub alloc_mw: *mut c_void,
    pub bind_mw: *mut c_void,
    pub dealloc_mw: *mut c_void,
    pub _compat_create_cq: *mut c_void,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub _compat_cq_event: *mut c_void,
    pub _compat_resize_cq: *mut c_void,
    pub _compat_destroy_cq: *mut c_void,
    pub _compat_create_srq: *mut c_void,
    pub _compat_modify_srq: *mut c_void,
    pub _compat_query_srq: *mut c_void,
    pub _compat_destroy_srq: *mut c_void,
    pub post_srq_recv: *mut c_void,
    pub _compat_create_qp: *mut c_void,
    pub _compat_query_qp: *mut c_void,
    pub _compat_modify_qp: *mut c_void,
    pub _compat_destroy_qp: *mut c_void,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: *mut c_void,
    pub _compat_destroy_ah: *mut c_void,
    pub _compat_attach_mcast: *mut c_void,
    pub _compat_detach_mcast: *mut c_void,
    pub _compat_async_event: *mut c_void,
}

/// `struct ibv_context`.
#[repr(C)]
pub(crate) struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `struct ibv_pd`.
#[repr(C)]
pub(crate) struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub(crate) struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub(crate) struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub(crate) struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub(crate) struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub(crate) struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The anonymous `imm_data` / `invalidate_rkey` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ibv_send_wr_imm {
    pub imm_data: u32,
    pub invalidate_rkey: u32,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr` (only for the union's size).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr` (only for the union's size).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_send_wr_ud {
    pub ah: *mut c_void,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// The `qp_type` union of `struct ibv_send_wr` (`xrc.remote_srqn`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ibv_send_wr_qp_type {
    pub remote_srqn: u32,
}

/// `struct ibv_mw_bind_info` (only for the size of the last union).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

/// `bind_mw` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_send_wr_bind_mw {
    pub mw: *mut c_void,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `tso` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The anonymous `bind_mw` / `tso` union that ends `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ibv_send_wr_ext {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: c_uint,
    /// C: the anonymous union of `imm_data` and `invalidate_rkey`.
    pub imm: ibv_send_wr_imm,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    /// C: the anonymous union of `bind_mw` and `tso`.
    pub ext: ibv_send_wr_ext,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// The anonymous `imm_data` / `invalidated_rkey` union of `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ibv_wc_imm {
    pub imm_data: u32,
    pub invalidated_rkey: u32,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// C: the anonymous union of `imm_data` and `invalidated_rkey`.
    pub imm: ibv_wc_imm,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

// ---------------------------------------------------------------------------------------------
// Constants (C enums; all of them are `unsigned int` sized)
// ---------------------------------------------------------------------------------------------

// enum ibv_gid_type
pub(crate) const IBV_GID_TYPE_IB: u32 = 0;
pub(crate) const IBV_GID_TYPE_ROCE_V1: u32 = 1;
pub(crate) const IBV_GID_TYPE_ROCE_V2: u32 = 2;

// enum ibv_port_state
pub(crate) const IBV_PORT_NOP: u32 = 0;
pub(crate) const IBV_PORT_DOWN: u32 = 1;
pub(crate) const IBV_PORT_INIT: u32 = 2;
pub(crate) const IBV_PORT_ARMED: u32 = 3;
pub(crate) const IBV_PORT_ACTIVE: u32 = 4;
pub(crate) const IBV_PORT_ACTIVE_DEFER: u32 = 5;

// the anonymous IBV_LINK_LAYER_* enum
pub(crate) const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub(crate) const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub(crate) const IBV_LINK_LAYER_ETHERNET: u8 = 2;

// enum ibv_access_flags
pub(crate) const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
pub(crate) const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub(crate) const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;

// enum ibv_qp_type
pub(crate) const IBV_QPT_RC: u32 = 2;

// enum ibv_qp_state
pub(crate) const IBV_QPS_RESET: u32 = 0;
pub(crate) const IBV_QPS_INIT: u32 = 1;
pub(crate) const IBV_QPS_RTR: u32 = 2;
pub(crate) const IBV_QPS_RTS: u32 = 3;
pub(crate) const IBV_QPS_SQD: u32 = 4;
pub(crate) const IBV_QPS_SQE: u32 = 5;
pub(crate) const IBV_QPS_ERR: u32 = 6;

// enum ibv_qp_attr_mask
pub(crate) const IBV_QP_STATE: c_int = 1 << 0;
pub(crate) const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub(crate) const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub(crate) const IBV_QP_PORT: c_int = 1 << 5;
pub(crate) const IBV_QP_AV: c_int = 1 << 7;
pub(crate) const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub(crate) const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub(crate) const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub(crate) const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub(crate) const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub(crate) const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub(crate) const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub(crate) const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub(crate) const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub(crate) const IBV_QP_DEST_QPN: c_int = 1 << 20;

// enum ibv_wr_opcode
pub(crate) const IBV_WR_RDMA_WRITE: u32 = 0;
pub(crate) const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub(crate) const IBV_WR_SEND: u32 = 2;
pub(crate) const IBV_WR_SEND_WITH_IMM: u32 = 3;
pub(crate) const IBV_WR_RDMA_READ: u32 = 4;

// enum ibv_send_flags
pub(crate) const IBV_SEND_SIGNALED: c_uint = 1 << 1;

// enum ibv_wc_flags
pub(crate) const IBV_WC_WITH_IMM: c_uint = 1 << 1;

// enum ibv_wc_opcode
pub(crate) const IBV_WC_SEND: u32 = 0;
pub(crate) const IBV_WC_RDMA_WRITE: u32 = 1;
pub(crate) const IBV_WC_RDMA_READ: u32 = 2;
pub(crate) const IBV_WC_RECV: u32 = 1 << 7;
pub(crate) const IBV_WC_RECV_RDMA_WITH_IMM: u32 = (1 << 7) + 1;

// enum ibv_wc_status
pub(crate) const IBV_WC_SUCCESS: u32 = 0;
pub(crate) const IBV_WC_LOC_LEN_ERR: u32 = 1;
pub(crate) const IBV_WC_LOC_QP_OP_ERR: u32 = 2;
pub(crate) const IBV_WC_LOC_PROT_ERR: u32 = 4;
pub(crate) const IBV_WC_WR_FLUSH_ERR: u32 = 5;
pub(crate) const IBV_WC_BAD_RESP_ERR: u32 = 7;
pub(crate) const IBV_WC_LOC_ACCESS_ERR: u32 = 8;
pub(crate) const IBV_WC_REM_INV_REQ_ERR: u32 = 9;
pub(crate) const IBV_WC_REM_ACCESS_ERR: u32 = 10;
pub(crate) const IBV_WC_REM_OP_ERR: u32 = 11;
pub(crate) const IBV_WC_RETRY_EXC_ERR: u32 = 12;
pub(crate) const IBV_WC_RNR_RETRY_EXC_ERR: u32 = 13;
pub(crate) const IBV_WC_REM_ABORT_ERR: u32 = 16;
pub(crate) const IBV_WC_FATAL_ERR: u32 = 19;
pub(crate) const IBV_WC_RESP_TIMEOUT_ERR: u32 = 20;
pub(crate) const IBV_WC_GENERAL_ERR: u32 = 21;

// ---------------------------------------------------------------------------------------------
// The library, resolved at run time
// ---------------------------------------------------------------------------------------------

/// What is opened by default: the soname rdma-core has had since libibverbs 1.1.
pub const LIBIBVERBS: &str = "libibverbs.so.1";

/// Names another file (or soname) to open instead of [`LIBIBVERBS`].
pub const LIBIBVERBS_ENV: &str = "QUARRY_LIBIBVERBS";

/// The exported functions this crate calls, resolved by name and symbol version.
pub(crate) struct Verbs {
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    pub free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    pub get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const c_char,
    pub get_device_guid: unsafe extern "C" fn(*mut ibv_device) -> u64,
    pub open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    pub close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    pub query_device: unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
    /// `ibv_query_port@IBVERBS_1.1`, whose last argument is `struct _compat_ibv_port_attr *`:
    /// the prefix of `ibv_port_attr` up to `flags`.
    pub query_port: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    pub query_gid_ex:
        unsafe extern "C" fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int,
    pub query_gid_table:
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_gid_entry, usize, u32, usize) -> isize,
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    pub dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    pub reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    pub dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    pub create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    pub destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    pub create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut ibv_comp_channel,
        c_int,
    ) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub get_cq_event:
        unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    pub ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, c_uint),
    pub create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub query_qp:
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    pub wc_status_str: unsafe extern "C" fn(u32) -> *const c_char,
}

/// Why libibverbs cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LoadError {
    /// dlopen failed (not installed, or the named file is missing or not a library).
    NotFound { library: String, detail: String },
    /// Opened, but an entry point is missing: older than rdma-core v32 (or not libibverbs).
    TooOld { library: String, missing: String },
}

impl LoadError {
    pub(crate) fn to_error(&self) -> Error {
        match self {
            LoadError::NotFound { library, .. } => Error::NoLibrary {
                library: library.clone(),
                problem: "not found".into(),
            },
            LoadError::TooOld { library, missing } => Error::NoLibrary {
                library: library.clone(),
                problem: format!(
                    "is too old: it has no {missing} (rdma-core v32 or later is needed)"
                ),
            },
        }
    }
}

/// A dlopen handle, never closed: the resolved functions (and the providers libibverbs loads)
/// must stay valid for the life of the process.
struct Handle(*mut c_void);

fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call of
    // this thread, copied here at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

impl Handle {
    fn open(library: &str) -> Result<Handle, LoadError> {
        let not_found = |detail: String| LoadError::NotFound {
            library: library.to_string(),
            detail,
        };
        let name = CString::new(library).map_err(|_| not_found("NUL in the name".into()))?;
        // SAFETY: a NUL-terminated name; dlopen runs the library's initializers, which for
        // libibverbs only set up its global state.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(not_found(dlerror_text()));
        }
        Ok(Handle(h))
    }

    /// The address of `name` at symbol version `version`.
    fn symbol(&self, name: &str, version: &str) -> Option<*mut c_void> {
        let n = CString::new(name).ok()?;
        let v = CString::new(version).ok()?;
        #[cfg(target_env = "gnu")]
        // SAFETY: a live handle and NUL-terminated strings; dlvsym only looks the symbol up.
        let p = unsafe { libc::dlvsym(self.0, n.as_ptr(), v.as_ptr()) };
        #[cfg(not(target_env = "gnu"))]
        // SAFETY: as above (no versioned lookup outside glibc: the default version).
        let p = unsafe {
            let _ = &v;
            libc::dlsym(self.0, n.as_ptr())
        };
        (!p.is_null()).then_some(p)
    }
}

/// A symbol's address as the function pointer type `F`.
///
/// # Safety
/// `F` is an `unsafe extern "C" fn` type whose signature is the symbol's C prototype.
unsafe fn fn_from_symbol<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: same size (checked), and the caller guarantees `F` is the right function type.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

macro_rules! resolve {
    ($h:expr, $missing:expr, { $($field:ident = $name:literal @ $ver:literal),* $(,)? }) => {
        Verbs {
            $($field: match $h.symbol($name, $ver) {
                // SAFETY: the symbol is libibverbs' `$name` at version `$ver`, whose C prototype
                // (verbs.h of rdma-core v44.0) is the field's function type.
                Some(p) => unsafe { fn_from_symbol(p) },
                None => {
                    $missing.push(concat!($name, "@", $ver));
                    return Err($missing);
                }
            },)*
        }
    };
}

fn resolve(h: &Handle) -> Result<Verbs, Vec<&'static str>> {
    let mut missing: Vec<&'static str> = Vec::new();
    Ok(resolve!(h, missing, {
        get_device_list = "ibv_get_device_list" @ "IBVERBS_1.1",
        free_device_list = "ibv_free_device_list" @ "IBVERBS_1.1",
        get_device_name = "ibv_get_device_name" @ "IBVERBS_1.1",
        get_device_guid = "ibv_get_device_guid" @ "IBVERBS_1.1",
        open_device = "ibv_open_device" @ "IBVERBS_1.1",
        close_device = "ibv_close_device" @ "IBVERBS_1.1",
        query_device = "ibv_query_device" @ "IBVERBS_1.1",
        query_port = "ibv_query_port" @ "IBVERBS_1.1",
        alloc_pd = "ibv_alloc_pd" @ "IBVERBS_1.1",
        dealloc_pd = "ibv_dealloc_pd" @ "IBVERBS_1.1",
        reg_mr = "ibv_reg_mr" @ "IBVERBS_1.1",
        dereg_mr = "ibv_dereg_mr" @ "IBVERBS_1.1",
        create_comp_channel = "ibv_create_comp_channel" @ "IBVERBS_1.0",
        destroy_comp_channel = "ibv_destroy_comp_channel" @ "IBVERBS_1.0",
        create_cq = "ibv_create_cq" @ "IBVERBS_1.1",
        destroy_cq = "ibv_destroy_cq" @ "IBVERBS_1.1",
        get_cq_event = "ibv_get_cq_event" @ "IBVERBS_1.1",
        ack_cq_events = "ibv_ack_cq_events" @ "IBVERBS_1.1",
        create_qp = "ibv_create_qp" @ "IBVERBS_1.1",
        modify_qp = "ibv_modify_qp" @ "IBVERBS_1.1",
        query_qp = "ibv_query_qp" @ "IBVERBS_1.1",
        destroy_qp = "ibv_destroy_qp" @ "IBVERBS_1.1",
        wc_status_str = "ibv_wc_status_str" @ "IBVERBS_1.1",
        query_gid_ex = "_ibv_query_gid_ex" @ "IBVERBS_1.11",
        query_gid_table = "_ibv_query_gid_table" @ "IBVERBS_1.11",
    }))
}

/// Opens `library` and resolves every entry point (pure: no process-wide state, for tests).
pub(crate) fn load(library: &str) -> Result<Verbs, LoadError> {
    let h = Handle::open(library)?;
    let verbs = resolve(&h).map_err(|missing| {
        // Nothing of it is used: close it again. A failed dlclose only leaks the mapping.
        // SAFETY: the handle was opened above and no symbol of it is kept.
        unsafe { libc::dlclose(h.0) };
        LoadError::TooOld {
            library: library.to_string(),
            missing: missing.join(", "),
        }
    })?;
    // `h` is never closed (see `Handle`): dropping it leaves the library loaded.
    Ok(verbs)
}

/// The library to open: `QUARRY_LIBIBVERBS` if set (and not empty), else [`LIBIBVERBS`].
pub(crate) fn library_name() -> String {
    std::env::var(LIBIBVERBS_ENV)
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| LIBIBVERBS.to_string())
}

static VERBS: OnceLock<Result<Verbs, LoadError>> = OnceLock::new();

/// libibverbs, loaded at the first call; `Err(NoLibrary)` (a "no RDMA here" error) when it is
/// missing or too old.
pub(crate) fn verbs() -> Result<&'static Verbs> {
    VERBS
        .get_or_init(|| {
            let library = library_name();
            let r = load(&library);
            match &r {
                Ok(_) => tracing::debug!(library, "libibverbs loaded"),
                Err(LoadError::NotFound { detail, .. }) => {
                    tracing::debug!(library, detail, "libibverbs not loaded")
                }
                Err(e) => tracing::debug!(library, ?e, "libibverbs not usable"),
            }
            r
        })
        .as_ref()
        .map_err(LoadError::to_error)
}

// ---------------------------------------------------------------------------------------------
// The inline verbs of verbs.h: calls through the context's ops table
// ---------------------------------------------------------------------------------------------

/// `ibv_poll_cq`: `cq->context->ops.poll_cq(cq, num_entries, wc)`.
///
/// # Safety
/// `cq` is a live CQ; `wc` has room for `num_entries` completions.
pub(crate) unsafe fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller guarantees a live CQ, whose context pointer and ops table libibverbs
    // filled in at creation; the provider always sets poll_cq.
    unsafe {
        match (*(*cq).context).ops.poll_cq {
            Some(f) => f(cq, num_entries, wc),
            None => -libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_req_notify_cq`: `cq->context->ops.req_notify_cq(cq, solicited_only)`.
///
/// # Safety
/// `cq` is a live CQ.
pub(crate) unsafe fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: as in `poll_cq`.
    unsafe {
        match (*(*cq).context).ops.req_notify_cq {
            Some(f) => f(cq, solicited_only),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_post_send`: `qp->context->ops.post_send(qp, wr, bad_wr)`.
///
/// # Safety
/// `qp` is a live QP; `wr` and `bad_wr` are valid for the call, and the memory `wr`'s SGEs point
/// into stays registered and untouched until the request completes.
pub(crate) unsafe fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the caller guarantees a live QP (its context and ops table set by libibverbs) and
    // valid arguments.
    unsafe {
        match (*(*qp).context).ops.post_send {
            Some(f) => f(qp, wr, bad_wr),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_post_recv`: `qp->context->ops.post_recv(qp, wr, bad_wr)`.
///
/// # Safety
/// As for [`post_send`].
pub(crate) unsafe fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: as in `post_send`.
    unsafe {
        match (*(*qp).context).ops.post_recv {
            Some(f) => f(qp, wr, bad_wr),
            None => libc::EOPNOTSUPP,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_not_found() {
        let e = load("/nonexistent/libibverbs.so.1")
            .err()
            .expect("must fail");
        match &e {
            LoadError::NotFound { library, detail } => {
                assert_eq!(library, "/nonexistent/libibverbs.so.1");
                assert!(detail.contains("No such file"), "{detail}");
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
        let err = e.to_error();
        assert!(err.is_no_device(), "{err:?}");
        assert_eq!(err.to_string(), "/nonexistent/libibverbs.so.1 not found");
    }

    #[test]
    fn a_library_without_the_entry_points_is_too_old() {
        // libc is always there and has none of libibverbs' symbols.
        let e = load("libc.so.6").err().expect("libc is not libibverbs");
        match &e {
            LoadError::TooOld { library, missing } => {
                assert_eq!(library, "libc.so.6");
                assert_eq!(missing, "ibv_get_device_list@IBVERBS_1.1");
            }
            other => panic!("expected TooOld, got {other:?}"),
        }
        let err = e.to_error();
        assert!(err.is_no_device(), "{err:?}");
        assert!(err.to_string().contains("rdma-core v32 or later"), "{err}");
    }

    #[test]
    fn the_installed_library_resolves_every_entry_point() {
        // Where rdma-core is installed (the test script installs it for the ABI check), every
        // symbol at its version must be there; elsewhere this says so and checks nothing more.
        match load(LIBIBVERBS) {
            Ok(_) => {}
            Err(LoadError::NotFound { detail, .. }) if !require_headers() => {
                eprintln!("SKIPPED: {LIBIBVERBS} is not installed here ({detail})");
            }
            Err(e) => panic!("{LIBIBVERBS}: {e:?}"),
        }
    }

    /// `QUARRY_VERBS_ABI_CHECK=1` (scripts/test sets it after installing libibverbs-dev): the
    /// header, the library and a C compiler must be there, a skip is a failure.
    fn require_headers() -> bool {
        std::env::var("QUARRY_VERBS_ABI_CHECK").is_ok_and(|v| v == "1")
    }

    /// Every struct, field and constant of this file against verbs.h: a C file of
    /// `_Static_assert`s made from the Rust layout, compiled with `cc`.
    #[test]
    fn abi_matches_verbs_h() {
        let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
        if !header.exists() {
            assert!(
                !require_headers(),
                "QUARRY_VERBS_ABI_CHECK=1 but {} is missing (apt install libibverbs-dev)",
                header.display()
            );
            eprintln!("SKIPPED: no {} (libibverbs-dev) here", header.display());
            return;
        }
        let c = abi_check_source();
        let dir = std::env::temp_dir().join(format!("quarry-verbs-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("abi.c");
        std::fs::write(&file, &c).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = std::process::Command::new(&cc)
            .args(["-std=gnu11", "-fsyntax-only", "-Werror"])
            .arg(&file)
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) if !require_headers() => {
                eprintln!("SKIPPED: no C compiler ({cc}: {e})");
                return;
            }
            Err(e) => panic!("{cc}: {e}"),
        };
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "the bindings do not match verbs.h:\n{}\n--- generated C:\n{c}",
            String::from_utf8_lossy(&out.stderr)
        );
        let n = c.matches("_Static_assert").count();
        assert!(n > 200, "only {n} assertions");
        eprintln!("verbs.h agrees with the Rust bindings: {n} assertions");
    }

    /// `size_of` the type a raw pointer points to (for field sizes, unions included).
    fn pointee_size<F>(_: *const F) -> usize {
        std::mem::size_of::<F>()
    }

    macro_rules! layout {
        ($out:ident, $c:literal = $ty:ty { $($field:ident $(as $cname:literal)?),* $(,)? }) => {{
            let t = $c;
            $out.push(format!(
                "_Static_assert(sizeof({t}) == {}, \"sizeof {t}\");",
                std::mem::size_of::<$ty>()
            ));
            $out.push(format!(
                "_Static_assert(_Alignof({t}) == {}, \"alignof {t}\");",
                std::mem::align_of::<$ty>()
            ));
            $(
                #[allow(unused_variables)]
                let name = stringify!($field);
                $(let name = $cname;)?
                $out.push(format!(
                    "_Static_assert(offsetof({t}, {name}) == {}, \"offsetof {t}.{name}\");",
                    std::mem::offset_of!($ty, $field)
                ));
                let v = std::mem::MaybeUninit::<$ty>::uninit();
                // SAFETY: only the address of a field of a live (uninitialized) value is taken;
                // nothing is read.
                let size = pointee_size(unsafe { std::ptr::addr_of!((*v.as_ptr()).$field) });
                $out.push(format!(
                    "_Static_assert(sizeof((({t} *)0)->{name}) == {size}, \"sizeof {t}.{name}\");"
                ));
            )*
        }};
    }

    macro_rules! consts {
        ($out:ident, $($name:ident),* $(,)?) => {
            $($out.push(format!(
                "_Static_assert({} == {}, \"{}\");",
                stringify!($name), $name as i64, stringify!($name)
            ));)*
        };
    }

    fn abi_check_source() -> String {
        let mut a: Vec<String> = Vec::new();
        layout!(a, "union ibv_gid" = ibv_gid { raw, global });
        layout!(
            a,
            "struct ibv_gid_entry" = ibv_gid_entry {
                gid,
                gid_index,
                port_num,
                gid_type,
                ndev_ifindex
            }
        );
        layout!(
            a,
            "struct ibv_device_attr" = ibv_device_attr {
                fw_ver,
                node_guid,
                sys_image_guid,
                max_mr_size,
                page_size_cap,
                vendor_id,
                vendor_part_id,
                hw_ver,
                max_qp,
                max_qp_wr,
                device_cap_flags,
                max_sge,
                max_sge_rd,
                max_cq,
                max_cqe,
                max_mr,
                max_pd,
                max_qp_rd_atom,
                max_ee_rd_atom,
                max_res_rd_atom,
                max_qp_init_rd_atom,
                max_ee_init_rd_atom,
                atomic_cap,
                max_ee,
                max_rdd,
                max_mw,
                max_raw_ipv6_qp,
                max_raw_ethy_qp,
                max_mcast_grp,
                max_mcast_qp_attach,
                max_total_mcast_qp_attach,
                max_ah,
                max_fmr,
                max_map_per_fmr,
                max_srq,
                max_srq_wr,
                max_srq_sge,
                max_pkeys,
                local_ca_ack_delay,
                phys_port_cnt
            }
        );
        layout!(
            a,
            "struct ibv_port_attr" = ibv_port_attr {
                state,
                max_mtu,
                active_mtu,
                gid_tbl_len,
                port_cap_flags,
                max_msg_sz,
                bad_pkey_cntr,
                qkey_viol_cntr,
                pkey_tbl_len,
                lid,
                sm_lid,
                lmc,
                max_vl_num,
                sm_sl,
                subnet_timeout,
                init_type_reply,
                active_width,
                active_speed,
                phys_state,
                link_layer,
                flags,
                port_cap_flags2
            }
        );
        layout!(
            a,
            "struct ibv_context_ops" = ibv_context_ops {
                _compat_query_device,
                _compat_query_port,
                _compat_alloc_pd,
                _compat_dealloc_pd,
                _compat_reg_mr,
                _compat_rereg_mr,
                _compat_dereg_mr,
                alloc_mw,
                bind_mw,
                dealloc_mw,
                _compat_create_cq,
                poll_cq,
                req_notify_cq,
                _compat_cq_event,
                _compat_resize_cq,
                _compat_destroy_cq,
                _compat_create_srq,
                _compat_modify_srq,
                _compat_query_srq,
                _compat_destroy_srq,
                post_srq_recv,
                _compat_create_qp,
                _compat_query_qp,
                _compat_modify_qp,
                _compat_destroy_qp,
                post_send,
                post_recv,
                _compat_create_ah,
                _compat_destroy_ah,
                _compat_attach_mcast,
                _compat_detach_mcast,
                _compat_async_event
            }
        );
        layout!(
            a,
            "struct ibv_context" = ibv_context {
                device,
                ops,
                cmd_fd,
                async_fd,
                num_comp_vectors,
                mutex,
                abi_compat
            }
        );
        layout!(a, "struct ibv_pd" = ibv_pd { context, handle });
        layout!(
            a,
            "struct ibv_mr" = ibv_mr {
                context,
                pd,
                addr,
                length,
                handle,
                lkey,
                rkey
            }
        );
        layout!(
            a,
            "struct ibv_comp_channel" = ibv_comp_channel {
                context,
                fd,
                refcnt
            }
        );
        layout!(
            a,
            "struct ibv_cq" = ibv_cq {
                context,
                channel,
                cq_context,
                handle,
                cqe,
                mutex,
                cond,
                comp_events_completed,
                async_events_completed
            }
        );
        layout!(
            a,
            "struct ibv_qp" = ibv_qp {
                context,
                qp_context,
                pd,
                send_cq,
                recv_cq,
                srq,
                handle,
                qp_num,
                state,
                qp_type,
                mutex,
                cond,
                events_completed
            }
        );
        layout!(
            a,
            "struct ibv_qp_cap" = ibv_qp_cap {
                max_send_wr,
                max_recv_wr,
                max_send_sge,
                max_recv_sge,
                max_inline_data
            }
        );
        layout!(
            a,
            "struct ibv_qp_init_attr" = ibv_qp_init_attr {
                qp_context,
                send_cq,
                recv_cq,
                srq,
                cap,
                qp_type,
                sq_sig_all
            }
        );
        layout!(
            a,
            "struct ibv_global_route" = ibv_global_route {
                dgid,
                flow_label,
                sgid_index,
                hop_limit,
                traffic_class
            }
        );
        layout!(
            a,
            "struct ibv_ah_attr" = ibv_ah_attr {
                grh,
                dlid,
                sl,
                src_path_bits,
                static_rate,
                is_global,
                port_num
            }
        );
        layout!(
            a,
            "struct ibv_qp_attr" = ibv_qp_attr {
                qp_state,
                cur_qp_state,
                path_mtu,
                path_mig_state,
                qkey,
                rq_psn,
                sq_psn,
                dest_qp_num,
                qp_access_flags,
                cap,
                ah_attr,
                alt_ah_attr,
                pkey_index,
                alt_pkey_index,
                en_sqd_async_notify,
                sq_draining,
                max_rd_atomic,
                max_dest_rd_atomic,
                min_rnr_timer,
                port_num,
                timeout,
                retry_cnt,
                rnr_retry,
                alt_port_num,
                alt_timeout,
                rate_limit
            }
        );
        layout!(a, "struct ibv_sge" = ibv_sge { addr, length, lkey });
        layout!(
            a,
            "struct ibv_mw_bind_info" = ibv_mw_bind_info {
                mr,
                addr,
                length,
                mw_access_flags
            }
        );
        layout!(a, "struct ibv_send_wr" = ibv_send_wr {
            wr_id, next, sg_list, num_sge, opcode, send_flags, imm as "imm_data", wr, qp_type,
            ext as "bind_mw"
        });
        // The members of the unions, through the C names.
        layout!(
            a,
            "__typeof__(((struct ibv_send_wr *)0)->wr.rdma)" =
                ibv_send_wr_rdma { remote_addr, rkey }
        );
        layout!(
            a,
            "__typeof__(((struct ibv_send_wr *)0)->wr.atomic)" = ibv_send_wr_atomic {
                remote_addr,
                compare_add,
                swap,
                rkey
            }
        );
        layout!(
            a,
            "__typeof__(((struct ibv_send_wr *)0)->wr.ud)" = ibv_send_wr_ud {
                ah,
                remote_qpn,
                remote_qkey
            }
        );
        layout!(
            a,
            "__typeof__(((struct ibv_send_wr *)0)->wr)" = ibv_send_wr_wr { rdma, atomic, ud }
        );
        layout!(a, "__typeof__(((struct ibv_send_wr *)0)->qp_type)" = ibv_send_wr_qp_type {
            remote_srqn as "xrc.remote_srqn"
        });
        layout!(
            a,
            "__typeof__(((struct ibv_send_wr *)0)->bind_mw)" = ibv_send_wr_bind_mw {
                mw,
                rkey,
                bind_info
            }
        );
        layout!(
            a,
            "__typeof__(((struct ibv_send_wr *)0)->tso)" = ibv_send_wr_tso { hdr, hdr_sz, mss }
        );
        layout!(
            a,
            "struct ibv_recv_wr" = ibv_recv_wr {
                wr_id,
                next,
                sg_list,
                num_sge
            }
        );
        layout!(a, "struct ibv_wc" = ibv_wc {
            wr_id, status, opcode, vendor_err, byte_len, imm as "imm_data", qp_num, src_qp,
            wc_flags, pkey_index, slid, sl, dlid_path_bits
        });
        // The anonymous unions: both of their members at the offset of the Rust union.
        a.push(format!(
            "_Static_assert(offsetof(struct ibv_send_wr, invalidate_rkey) == {}, \"invalidate_rkey\");",
            std::mem::offset_of!(ibv_send_wr, imm)
        ));
        a.push(format!(
            "_Static_assert(offsetof(struct ibv_send_wr, tso) == {}, \"tso\");",
            std::mem::offset_of!(ibv_send_wr, ext)
        ));
        a.push(format!(
            "_Static_assert(offsetof(struct ibv_wc, invalidated_rkey) == {}, \"invalidated_rkey\");",
            std::mem::offset_of!(ibv_wc, imm)
        ));
        consts!(
            a,
            IBV_GID_TYPE_IB,
            IBV_GID_TYPE_ROCE_V1,
            IBV_GID_TYPE_ROCE_V2,
            IBV_PORT_NOP,
            IBV_PORT_DOWN,
            IBV_PORT_INIT,
            IBV_PORT_ARMED,
            IBV_PORT_ACTIVE,
            IBV_PORT_ACTIVE_DEFER,
            IBV_LINK_LAYER_UNSPECIFIED,
            IBV_LINK_LAYER_INFINIBAND,
            IBV_LINK_LAYER_ETHERNET,
            IBV_ACCESS_LOCAL_WRITE,
            IBV_ACCESS_REMOTE_WRITE,
            IBV_ACCESS_REMOTE_READ,
            IBV_QPT_RC,
            IBV_QPS_RESET,
            IBV_QPS_INIT,
            IBV_QPS_RTR,
            IBV_QPS_RTS,
            IBV_QPS_SQD,
            IBV_QPS_SQE,
            IBV_QPS_ERR,
            IBV_QP_STATE,
            IBV_QP_ACCESS_FLAGS,
            IBV_QP_PKEY_INDEX,
            IBV_QP_PORT,
            IBV_QP_AV,
            IBV_QP_PATH_MTU,
            IBV_QP_TIMEOUT,
            IBV_QP_RETRY_CNT,
            IBV_QP_RNR_RETRY,
            IBV_QP_RQ_PSN,
            IBV_QP_MAX_QP_RD_ATOMIC,
            IBV_QP_MIN_RNR_TIMER,
            IBV_QP_SQ_PSN,
            IBV_QP_MAX_DEST_RD_ATOMIC,
            IBV_QP_DEST_QPN,
            IBV_WR_RDMA_WRITE,
            IBV_WR_RDMA_WRITE_WITH_IMM,
            IBV_WR_SEND,
            IBV_WR_SEND_WITH_IMM,
            IBV_WR_RDMA_READ,
            IBV_SEND_SIGNALED,
            IBV_WC_WITH_IMM,
            IBV_WC_SEND,
            IBV_WC_RDMA_WRITE,
            IBV_WC_RDMA_READ,
            IBV_WC_RECV,
            IBV_WC_RECV_RDMA_WITH_IMM,
            IBV_WC_SUCCESS,
            IBV_WC_LOC_LEN_ERR,
            IBV_WC_LOC_QP_OP_ERR,
            IBV_WC_LOC_PROT_ERR,
            IBV_WC_WR_FLUSH_ERR,
            IBV_WC_BAD_RESP_ERR,
            IBV_WC_LOC_ACCESS_ERR,
            IBV_WC_REM_INV_REQ_ERR,
            IBV_WC_REM_ACCESS_ERR,
            IBV_WC_REM_OP_ERR,
            IBV_WC_RETRY_EXC_ERR,
            IBV_WC_RNR_RETRY_EXC_ERR,
            IBV_WC_REM_ABORT_ERR,
            IBV_WC_FATAL_ERR,
            IBV_WC_RESP_TIMEOUT_ERR,
            IBV_WC_GENERAL_ERR,
        );
        let mut c = String::from(
            "/* Generated by quarry-verbs' sys::tests::abi_matches_verbs_h from the Rust bindings. */\n\
             #include <stddef.h>\n#include <infiniband/verbs.h>\n",
        );
        for line in a {
            c.push_str(&line);
            c.push('\n');
        }
        c
    }
}
