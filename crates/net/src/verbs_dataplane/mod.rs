//! The verbs (RDMA) backend of the [`DataPlane`]: [`VerbsDataPlane`] on the node that serves an
//! S3 request (the *requester*), [`VerbsResponder`] on the node whose drive holds the shard (the
//! *holder*, served by [`crate::DriveServer`]).
//!
//! # Memory: registered pools
//!
//! Both sides work on [`BufPool`]s whose slabs were registered once with the device
//! ([`BufPool::registered`]): the requester's pool is the node's data pool (the TCP backend and the
//! object layer use the same one: GET stripes land in it, PUT chunks are encoded into it), the
//! holder's is its drive server's pool. Nothing is registered per I/O.
//!
//! # GET (server push, DESIGN.md "Data plane")
//!
//! 1. **Connect** (once per queue pair, again after an error): the requester creates an RC QP,
//!    pre-posts one empty receive per credit ([`VerbsConfig::credits`]) and calls the holder's
//!    [`METHOD_CONNECT`] over the control RPC with `(protocol version, QpEndpoint)` (QPN, PSN,
//!    GID and the requester's port MTU). The holder creates its QP, connects it (path MTU: the
//!    smaller of both) and answers `(version, connection id, its QpEndpoint)`; the requester
//!    connects its side. A peer gets [`VerbsConfig::qp_per_peer`] such connections, used in turn.
//! 2. **Read**: the object layer cuts one pooled buffer into the k chunk slots of a block (the
//!    stripe buffer) and hands each slot to a shard read. The requester takes a credit, records
//!    `tag -> (slot, credit)` in the connection's pending table and calls [`METHOD_READ`] with
//!    `(connection id, tag, address, rkey, length, shard range)` — the address of that slot in the
//!    stripe. The holder reads the range from its drive straight into one of its registered
//!    buffers and RDMA-WRITEs it WITH IMMEDIATE `tag` to that exact place; it answers the call
//!    only after its write completed (an error only if it did not write, or its write failed).
//! 3. **Completion**: the immediate consumes one of the pre-posted receives; the requester's
//!    completion task reposts a receive, takes `tag` out of the pending table and hands the slot
//!    to the waiting read (RC ordering puts the bytes in place before the immediate). The slot
//!    becomes the chunk's `Bytes` without a copy, and the HTTP body is those `Bytes`.
//!
//! # PUT: the holder reads (RDMA READ), the requester never sends
//!
//! The PUT path encodes every block straight into pooled (registered) buffers: parity computed
//! into place, hashes in front of each chunk. For an append, the requester looks the chunk's
//! `Bytes` up in its pool ([`BufPool::remote_of`]) and calls [`METHOD_APPEND`] with `(connection
//! id, tag, writer, sequence number, address, rkey, length)`, keeping the `Bytes` (and so the
//! buffer) in the pending table. The holder waits for the append's turn (every earlier append of
//! that writer is there), takes a registered buffer, RDMA-READs the chunk into it, hands it to the
//! shard writer (which writes appends in sequence order, as for TCP) and answers. The answer ends
//! the requester's hold on the bytes.
//!
//! Why RDMA READ rather than SEND into pre-posted receives: a SEND needs a receive buffer big
//! enough for a whole chunk posted ahead at the holder for every credit of every connection
//! (16 credits x 1 MiB x every peer connection, pinned, mostly idle), and the sender cannot know
//! which of the holder's writers will take it; with READ the holder spends a buffer only when it is
//! ready to write, reads at the pace of its disk, and the bytes go straight from the buffer they
//! were encoded into to the buffer the drive writes from. It costs the holder one round trip
//! (the READ request) per chunk, which for 1 MiB chunks is small next to the transfer itself.
//! The SEND variant was measured against it in the VM (see the note of the change that added this).
//!
//! The holder fetches the appends of one writer in order (append `s` only after `s - 1` has its
//! bytes), so a writer never holds a buffer while it waits for an earlier append that needs one:
//! holders of buffers are always reading or writing, never waiting on each other, whatever the
//! pool size.
//!
//! Why the control RPC carries the requests rather than SENDs on the QP: they are small, the RPC
//! is authenticated, has timeouts and carries the holder's drive errors with their codes, and the
//! holder needs no receive buffers or credits in that direction. The bulk bytes are the part that
//! must avoid copies, and they go by RDMA WRITE and READ.
//!
//! # Credits, bounds, cancellation
//!
//! A credit is one pre-posted receive; a read holds one from before its request leaves until its
//! immediate arrived (the credit lives in the pending entry, not in the read's future), so more
//! WRITE WITH IMMEDIATE than posted receives can never be in flight: no RNR. Appends hold one of
//! as many append permits per connection. Both bound the transfers in flight per peer.
//!
//! Memory lent to a peer (a slot it may write, bytes it may read) is owned by the pending table
//! until the transfer is known to be over — its immediate arrived, or the holder answered — or the
//! QP is known dead: a dropped or timed-out transfer leaves it there. A timeout moves the QP to the
//! error state; the completion task then sees every posted receive flushed (the QP is drained: no
//! more remote access through it) and only then releases what is pending and fails the waiting
//! transfers with [`DataPlaneError::Verbs`]. Buffers the holder posts are protected by
//! `quarry-verbs` itself (they live in the CQ's in-flight table until their completion) and go
//! back to the holder's pool from the completion ([`quarry_buf::Posted::restore`]).
//!
//! # Failure, back-off and fallback
//!
//! A completion error or timeout breaks the connection (counted in `qp_errors`); the next transfer
//! reconnects (`reconnects`). A peer whose connection cannot be set up is retried with a jittered,
//! doubling back-off ([`VerbsConfig::backoff_initial`] .. [`VerbsConfig::backoff_max`]), failing
//! fast meanwhile. With [`VerbsConfig::fallback`] (`QUARRY_RDMA=auto`) a read that failed on verbs
//! (reads are idempotent), or a peer that cannot be connected, is served by the TCP backend instead
//! and the peer stays on TCP for [`VerbsConfig::fallback_for`] (logged, counted in `fallbacks`);
//! without it (`on`) the error is returned. An append moves to TCP only if no byte of it can have
//! moved (no connection, memory not registered, the holder did not know the connection); one that
//! failed later fails (its shard writer fails, and the PUT goes on if its quorum holds). Drive
//! errors of the holder are returned as they are either way.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes};
use quarry_disk::path::{validate_bucket, validate_key};
use quarry_disk::Drive;
use quarry_verbs::{
    Access, AsyncCompletionQueue, ConnectOptions, Context, GidEntry, Opcode, ProtectionDomain,
    QpCaps, QpEndpoint, QueuePair, RemoteBuf, WrId, ENDPOINT_LEN,
};
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::backoff::PeerBackoff;
use crate::dataplane::{
    DataPlane, DataPlaneError, DataPlaneStats, PeerMetrics, PeerSnapshot, ShardData, ShardRange,
    Transfer,
};
use crate::drive_proto;
use crate::lock;
use crate::rdma::RDMA_PORT;
use crate::rpc::{codes, RpcClient, RpcError};
use quarry_buf::{BufPool, PooledBuf, Posted};

/// Control-RPC methods and error codes of the verbs data plane (declared in the registry,
/// [`crate::methods`]).
pub use crate::methods::{
    CODE_VERBS_BUSY as CODE_BUSY, CODE_VERBS_FAILED,
    CODE_VERBS_NO_CONNECTION as CODE_NO_CONNECTION, VERBS_APPEND as METHOD_APPEND,
    VERBS_CONNECT as METHOD_CONNECT, VERBS_READ as METHOD_READ,
};
/// Version of the messages of the verbs data plane (2: appends; 3: the one internode codec).
pub const PROTOCOL_VERSION: u8 = 3;

/// How long a holder waits for a free registered buffer before it answers [`CODE_BUSY`]: long
/// enough to ride out a burst, short next to the requester's timeout.
pub const BUSY_WAIT: Duration = Duration::from_millis(250);

/// Access the requester's pool is registered with: holders RDMA-WRITE GET chunks into it and
/// RDMA-READ PUT chunks from it.
pub fn requester_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
}

/// Access the holder's pool is registered with: drive reads land in it and are RDMA-WRITTEN
/// from it; RDMA READs of appends land in it.
pub fn holder_access() -> Access {
    Access::LOCAL_WRITE
}

mod client;
mod device;
mod holder;
mod messages;
mod requester;

pub use client::*;
pub use device::*;
pub use holder::*;
pub use messages::*;
pub use requester::*;
