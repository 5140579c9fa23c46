//! Safe wrapper over libibverbs, loaded at run time: devices, ports and GIDs, protection
//! domains, completion queues with a completion channel, RC queue pairs connected from an
//! out-of-band exchanged [`QpEndpoint`], memory regions, and posting SEND / RECV / RDMA WRITE
//! (with immediate) / RDMA READ.
//!
//! This is the only crate in Quarry with FFI `unsafe`; every `unsafe` block says why it is sound.
//! It knows nothing about Quarry's protocol: connection exchange, credits, retries and the TCP
//! fallback live in `quarry-net`.
//!
//! # No device, no library
//!
//! A machine without an RDMA device, or whose kernel has no RDMA support, is normal: [`devices`]
//! and [`Context::open`] return [`Error::NoDevice`], never panic.
//!
//! Nothing of rdma-core is needed to build this crate: libibverbs is opened with `dlopen` at the
//! first call ([`LIBIBVERBS`], `libibverbs.so.1`, or the file or soname the environment variable
//! `QUARRY_LIBIBVERBS` names), and its entry points are resolved by name and symbol version. The
//! bindings are hand-written from rdma-core v44.0's `verbs.h` and checked against the real header
//! by a test (`sys::tests::abi_matches_verbs_h`). A library that is missing, or older than
//! rdma-core v32, is [`Error::NoLibrary`], for which [`Error::is_no_device`] is true too: the
//! caller uses TCP. At run time the RDMA path needs rdma-core's `libibverbs.so.1` and the
//! provider of the device (Debian: `libibverbs1` and `ibverbs-providers`).
//!
//! # Connecting two QPs
//!
//! ```no_run
//! use quarry_verbs::{Access, ConnectOptions, Context, QpCaps, QpEndpoint};
//! # fn exchange(mine: [u8; quarry_verbs::ENDPOINT_LEN]) -> Vec<u8> { mine.to_vec() }
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ctx = Context::open(Some("rxe0"))?; // Err(NoDevice) without RDMA: use TCP
//! let my_addr = "10.55.0.1".parse()?;
//! let gid = ctx.select_roce_v2_gid(1, Some(my_addr))?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(256)?;
//! let qp = pd.create_rc_qp(&cq, &cq, 1, &gid, QpCaps::default())?; // RESET -> INIT
//! qp.post_recv_empty()?; // receives before the peer can send
//! // Out of band (the control channel): send ours, get theirs.
//! let theirs = QpEndpoint::decode(&exchange(qp.endpoint().encode()))?;
//! let qp = qp.connect(&theirs, &ConnectOptions::default())?; // INIT -> RTR -> RTS
//! let buf = pd.alloc_region(1 << 20, Access::LOCAL_WRITE)?.into_buf();
//! qp.post_send(buf, 100, Some(42))?;
//! # Ok(())
//! # }
//! ```
//!
//! # Resource lifetimes
//!
//! Every resource holds a reference-counted handle on what it was made from: a [`QueuePair`]
//! keeps its [`ProtectionDomain`] and both [`CompletionQueue`]s alive, a [`MemoryRegion`] (and
//! every [`MrBuf`] cut from it) keeps its protection domain alive, and those keep the [`Context`]
//! (the open device) alive. So a QP can never outlive its PD or CQs, nor an MR its PD, and the
//! device is closed only after the last of them is destroyed.
//!
//! # Posted buffers: the contract
//!
//! The device reads and writes posted buffers asynchronously, after the post call has returned.
//! The types make sure that memory stays valid and is not touched by Rust code meanwhile:
//!
//! 1. Memory that the device may access is owned by a [`MemoryRegion`]: it is allocated by
//!    [`ProtectionDomain::alloc_region`] or moved in by [`ProtectionDomain::register`]. It is
//!    freed only after `ibv_dereg_mr` has returned, that is after the device can no longer reach it
//!    through this region's lkey or rkey, and only once no [`MrBuf`] of the region is left.
//! 2. Local access goes through [`MrBuf`]s: disjoint, owned slices of a region, made once by
//!    [`MemoryRegion::into_bufs`] / [`MemoryRegion::into_buf`] / [`MrBuf::split_at`]. Holding an
//!    `MrBuf` is the only way to read or write its bytes, like holding a `Box<[u8]>`.
//! 3. Posting a work request *moves* the `MrBuf` into the in-flight table of the completion queue
//!    the request will complete on. It comes back only inside the [`Completion`] of that request
//!    ([`Completion::buf`]), successful or not (a flushed request returns its buffer too). So a
//!    buffer under a posted request cannot be read, reused or freed by the program: dropping or
//!    cancelling whatever waits for the completion leaves the buffer in the table, where the device
//!    may still use it. If a post fails, the buffer comes back in the [`PostError`].
//! 4. To get every buffer back from a connection, move the QP to the error state
//!    ([`QueuePair::set_error`]) and poll its CQ until [`QueuePair::in_flight`] is 0: every
//!    outstanding request completes with a flush error and returns its buffer. Dropping the last
//!    handle of a QP does the same without handing buffers back: it moves the QP to error, destroys
//!    it (after `ibv_destroy_qp` returns, the device no longer processes its work requests), and only
//!    then releases the buffers still in the table.
//!
//! The compiler enforces rules 2 and 3. A posted buffer is gone from the caller:
//!
//! ```compile_fail
//! # fn misuse(qp: &quarry_verbs::QueuePair, buf: quarry_verbs::MrBuf) {
//! qp.post_send(buf, 4, None).unwrap();
//! let _ = buf.as_slice(); // error: `buf` was moved into the in-flight table
//! # }
//! ```
//!
//! and comes back only from the completion (or from a failed post):
//!
//! ```no_run
//! # fn proper(qp: &quarry_verbs::QueuePair, buf: quarry_verbs::MrBuf) -> quarry_verbs::Result<()> {
//! qp.post_send(buf, 4, None)?;
//! let mut done = Vec::new();
//! while qp.send_cq().poll(&mut done, 1)? == 0 {}
//! let buf = done.pop().and_then(|c| c.buf).expect("the buffer comes back");
//! let _ = buf.as_slice();
//! # Ok(())
//! # }
//! ```
//!
//! A buffer cannot be duplicated, and a prepared (unconnected) QP cannot send:
//!
//! ```compile_fail
//! # fn misuse(buf: quarry_verbs::MrBuf) {
//! let copy = buf.clone(); // error: MrBuf is not Clone
//! # }
//! ```
//!
//! ```compile_fail
//! # fn misuse(qp: &quarry_verbs::PreparedQp, buf: quarry_verbs::MrBuf) {
//! qp.post_send(buf, 4, None); // error: no post_send before connect
//! # }
//! ```
//!
//! # Remote access
//!
//! A region registered with [`Access::REMOTE_WRITE`] / [`Access::REMOTE_READ`] can be accessed by
//! any connected peer that knows its rkey ([`MrBuf::remote`] describes a slice to send to a peer),
//! at any time, without a local work request: that is what RDMA is. The hardware confines such
//! access to the region's bounds, and the memory stays allocated as long as the region is
//! registered (rule 1), so a peer can never reach freed memory. What the local owner of an
//! `MrBuf` reads while a peer may be writing into it is up to the protocol: bytes are plain `u8`
//! with no invalid values, and the completion of the peer's WRITE WITH IMMEDIATE (RC ordering
//! puts the data before it) says when they are final. Hand out remote descriptors only for slices
//! whose content you will not trust until such a completion.
//!
//! # Completions in tokio
//!
//! Each [`CompletionQueue`] has its own completion channel whose fd is non-blocking and
//! implements [`std::os::fd::AsFd`], for `tokio::io::unix::AsyncFd`. The loop is: poll until empty,
//! [`CompletionQueue::req_notify`], poll again (a completion may have slipped in before arming),
//! and only if that finds nothing wait for the fd, [`CompletionQueue::consume_events`] and start
//! over.

#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

mod cq;
mod device;
mod endpoint;
mod error;
mod memlock;
mod mr;
mod qp;
mod sys;

#[cfg(feature = "tokio")]
pub use cq::AsyncCompletionQueue;
pub use cq::{Completion, CompletionError, CompletionQueue, Opcode, WcStatus, WrId};
pub use device::{
    devices, Context, DeviceCaps, DeviceInfo, Gid, GidEntry, GidType, LinkLayer, Mtu, PortAttr,
    PortState,
};
pub use endpoint::{EndpointError, QpEndpoint, ENDPOINT_LEN, ENDPOINT_VERSION};
pub use error::{Error, PostError, Result};
pub use memlock::{check_memlock, memlock_limit};
pub use mr::{Access, HeldSlice, MemoryRegion, MrBuf, ProtectionDomain, RegionHandle, RemoteBuf};
pub use qp::{ConnectOptions, PreparedQp, QpCaps, QpState, QueuePair};
pub use sys::{LIBIBVERBS, LIBIBVERBS_ENV};
