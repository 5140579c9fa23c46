//! Protection domains, memory regions, and the owned buffers cut from them.

use std::alloc::{self, Layout};
use std::fmt;
use std::io;
use std::ops::{BitOr, BitOrAssign, Range};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::device::Context;
use crate::error::{Error, Result};
use crate::memlock::memlock_limit;
use crate::sys;

/// Bytes registered by this process through this crate, for the RLIMIT_MEMLOCK message.
static REGISTERED: AtomicU64 = AtomicU64::new(0);

/// Alignment of regions from [`ProtectionDomain::alloc_region`].
pub const REGION_ALIGN: usize = 4096;

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) pd: *mut sys::ibv_pd,
}

// SAFETY: a PD is a handle the (thread-safe) verbs library accepts from any thread; it is only
// deallocated in Drop, when no QP or MR (each holds an Arc) is left.
unsafe impl Send for PdInner {}
// SAFETY: see Send.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: the PD was allocated by ibv_alloc_pd; every QP and MR made from it holds an
        // Arc on it, so none is left.
        let rc = unsafe { (self.ctx.v().dealloc_pd)(self.pd) };
        if rc != 0 {
            tracing::warn!(
                "ibv_dealloc_pd failed: {}",
                io::Error::from_raw_os_error(rc)
            );
        }
    }
}

/// A protection domain: QPs and MRs of one PD work together. Cheap to clone.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.inner.ctx.name())
            .finish()
    }
}

impl Context {
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        // SAFETY: the context is open for the call; the PD keeps a clone of it.
        let pd = unsafe { (self.v().alloc_pd)(self.ptr()) };
        if pd.is_null() {
            return Err(Error::last_os("ibv_alloc_pd"));
        }
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                ctx: self.clone(),
                pd,
            }),
        })
    }
}

impl ProtectionDomain {
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    pub(crate) fn ptr(&self) -> *mut sys::ibv_pd {
        self.inner.pd
    }

    pub(crate) fn same(&self, other: &ProtectionDomain) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Allocates `len` zeroed bytes, page-aligned, and registers them.
    pub fn alloc_region(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        if len == 0 {
            return Err(Error::InvalidArgument(
                "cannot register an empty region".into(),
            ));
        }
        let layout = Layout::from_size_align(len, REGION_ALIGN)
            .map_err(|e| Error::InvalidArgument(format!("region of {len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::Verbs {
            op: "allocating a region",
            source: io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        self.register_raw(ptr, len, Backing::Aligned(layout), access)
    }

    /// Registers memory the caller allocated; the region owns it from now on (see the crate doc:
    /// memory the device may touch must not be reachable any other way).
    pub fn register(&self, buf: impl Into<Box<[u8]>>, access: Access) -> Result<MemoryRegion> {
        let buf: Box<[u8]> = buf.into();
        let len = buf.len();
        if len == 0 {
            return Err(Error::InvalidArgument(
                "cannot register an empty region".into(),
            ));
        }
        let raw: *mut [u8] = Box::into_raw(buf);
        // SAFETY: Box::into_raw never returns null.
        let ptr = unsafe { NonNull::new_unchecked(raw.cast::<u8>()) };
        self.register_raw(ptr, len, Backing::Boxed, access)
    }

    fn register_raw(
        &self,
        ptr: NonNull<u8>,
        len: usize,
        backing: Backing,
        mut access: Access,
    ) -> Result<MemoryRegion> {
        // Remote write access requires local write access (a verbs rule).
        if access.contains(Access::REMOTE_WRITE) {
            access |= Access::LOCAL_WRITE;
        }
        // From here on, the memory is owned by `guard` and freed on any error path.
        let guard = Memory { ptr, len, backing };
        let limit = memlock_limit().ok().flatten();
        let already = REGISTERED.load(Ordering::Relaxed);
        if let Some(limit) = limit {
            if (len as u64) > limit {
                return Err(Error::MemlockTooSmall {
                    needed: already + len as u64,
                    limit,
                });
            }
        }
        // SAFETY: `ptr..ptr+len` is memory owned by `guard`, which stays allocated until after
        // ibv_dereg_mr (MrInner::drop); the PD is alive for the call and the MR keeps it alive.
        let mr = unsafe {
            (self.inner.ctx.v().reg_mr)(
                self.ptr(),
                ptr.as_ptr().cast(),
                len,
                access.0 as std::os::raw::c_int,
            )
        };
        if mr.is_null() {
            let source = io::Error::last_os_error();
            let errno = source.raw_os_error().unwrap_or(0);
            if let (Some(limit), true) = (
                limit,
                errno == libc::ENOMEM || errno == libc::EPERM || errno == libc::EAGAIN,
            ) {
                return Err(Error::MemlockTooSmall {
                    needed: already + len as u64,
                    limit,
                });
            }
            return Err(Error::Verbs {
                op: "ibv_reg_mr",
                source,
            });
        }
        REGISTERED.fetch_add(len as u64, Ordering::Relaxed);
        // SAFETY: ibv_reg_mr returned a valid MR; lkey/rkey are plain fields.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(MemoryRegion {
            inner: Arc::new(MrInner {
                pd: self.clone(),
                mr,
                mem: Some(guard),
                lkey,
                rkey,
                access,
            }),
        })
    }
}

/// Memory access rights of a region (`ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Access(u32);

impl Access {
    /// Only the device's local reads (SEND, RDMA WRITE source).
    pub const LOCAL_READ: Access = Access(0);
    /// Local writes: RECV and RDMA READ destinations.
    pub const LOCAL_WRITE: Access = Access(sys::IBV_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA WRITE into the region (implies LOCAL_WRITE).
    pub const REMOTE_WRITE: Access = Access(sys::IBV_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA READ from the region.
    pub const REMOTE_READ: Access = Access(sys::IBV_ACCESS_REMOTE_READ);

    /// The `ibv_access_flags` bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

enum Backing {
    /// From `alloc_zeroed` with this layout.
    Aligned(Layout),
    /// From `Box<[u8]>::into_raw`.
    Boxed,
}

/// Memory owned by a region: freed on drop.
struct Memory {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

impl Drop for Memory {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: allocated by alloc_zeroed with exactly this layout, freed once here.
            Backing::Aligned(layout) => unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) },
            Backing::Boxed => {
                let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
                // SAFETY: made by Box::into_raw of a `Box<[u8]>` of `len` bytes, freed once here.
                drop(unsafe { Box::from_raw(slice) });
            }
        }
    }
}

pub(crate) struct MrInner {
    pd: ProtectionDomain,
    mr: *mut sys::ibv_mr,
    /// `None` only if deregistration failed: the memory is then leaked on purpose.
    mem: Option<Memory>,
    lkey: u32,
    rkey: u32,
    access: Access,
}

// SAFETY: the MR handle may be used and deregistered from any thread (thread-safe verbs). The
// memory behind it is reached only through `MrBuf`s of disjoint ranges, each owned by one holder
// (like `Box<[u8]>`), so sharing `MrInner` between threads shares no bytes.
unsafe impl Send for MrInner {}
// SAFETY: see Send.
unsafe impl Sync for MrInner {}

impl Drop for MrInner {
    fn drop(&mut self) {
        // SAFETY: the MR came from ibv_reg_mr and is deregistered once. No MrBuf is left (each
        // holds an Arc), so no posted work request refers to it either (the in-flight tables own
        // the MrBufs of posted requests).
        let rc = unsafe { (self.pd.context().v().dereg_mr)(self.mr) };
        if rc != 0 {
            // The device might still reach the memory: never free it.
            tracing::error!(
                "ibv_dereg_mr failed ({}): leaking the region's memory",
                io::Error::from_raw_os_error(rc)
            );
            if let Some(mem) = self.mem.take() {
                std::mem::forget(mem);
            }
            return;
        }
        if let Some(mem) = &self.mem {
            REGISTERED.fetch_sub(mem.len as u64, Ordering::Relaxed);
        }
        // `mem` drops after this, freeing the memory.
    }
}

impl MrInner {
    fn base(&self) -> *mut u8 {
        self.mem
            .as_ref()
            .map_or(std::ptr::null_mut(), |m| m.ptr.as_ptr())
    }

    fn len(&self) -> usize {
        self.mem.as_ref().map_or(0, |m| m.len)
    }
}

/// A registered memory region that owns its memory. Cut it into [`MrBuf`]s to use the bytes.
pub struct MemoryRegion {
    inner: Arc<MrInner>,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("len", &self.len())
            .field("lkey", &self.inner.lkey)
            .field("rkey", &self.inner.rkey)
            .finish()
    }
}

impl MemoryRegion {
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn lkey(&self) -> u32 {
        self.inner.lkey
    }

    pub fn rkey(&self) -> u32 {
        self.inner.rkey
    }

    pub fn access(&self) -> Access {
        self.inner.access
    }

    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// The whole region as one buffer.
    pub fn into_buf(self) -> MrBuf {
        let len = self.len();
        MrBuf {
            mr: self.inner,
            offset: 0,
            len,
        }
    }

    /// The region cut into consecutive buffers of `chunk` bytes (the last one shorter if `chunk`
    /// does not divide the length).
    pub fn into_bufs(self, chunk: usize) -> Result<Vec<MrBuf>> {
        if chunk == 0 {
            return Err(Error::InvalidArgument("chunk size 0".into()));
        }
        let len = self.len();
        Ok((0..len)
            .step_by(chunk)
            .map(|offset| MrBuf {
                mr: self.inner.clone(),
                offset,
                len: chunk.min(len - offset),
            })
            .collect())
    }
}

/// A handle that keeps a registered region registered (and its memory allocated): what
/// [`HeldSlice`] needs to prove that bytes it names are inside registered memory. Made by
/// [`MrBuf::region`]; it gives no access to the bytes.
#[derive(Clone)]
pub struct RegionHandle {
    mr: Arc<MrInner>,
}

impl fmt::Debug for RegionHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegionHandle")
            .field("addr", &format_args!("{:#x}", self.mr.base() as usize))
            .field("len", &self.mr.len())
            .field("lkey", &self.mr.lkey)
            .finish()
    }
}

impl RegionHandle {
    /// Whether `len` bytes at `addr` lie inside the region.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        let base = self.mr.base() as usize;
        addr >= base
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= base + self.mr.len())
    }

    pub fn pd(&self) -> &ProtectionDomain {
        &self.mr.pd
    }
}

/// Bytes that a work request may read (the source of an RDMA WRITE) without being moved into
/// an [`MrBuf`]: an immutable owner (such as `bytes::Bytes` cut from a pooled buffer) whose
/// bytes lie inside a registered region, and a handle on that region. Both stay in the in-flight
/// table until the completion, so the region stays registered and the owner keeps the bytes
/// alive and unchanged while the device reads them. This is how data already in registered
/// memory, shared read-only, is sent without a copy.
pub struct HeldSlice {
    region: RegionHandle,
    owner: Box<dyn AsRef<[u8]> + Send + Sync>,
}

impl fmt::Debug for HeldSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = (*self.owner).as_ref();
        f.debug_struct("HeldSlice")
            .field("addr", &format_args!("{:#x}", b.as_ptr() as usize))
            .field("len", &b.len())
            .finish()
    }
}

impl HeldSlice {
    /// `owner`'s bytes held for a work request; `Err(owner)` when they are not inside `region`.
    #[allow(clippy::type_complexity)]
    pub fn new(
        region: RegionHandle,
        owner: Box<dyn AsRef<[u8]> + Send + Sync>,
    ) -> std::result::Result<HeldSlice, Box<dyn AsRef<[u8]> + Send + Sync>> {
        let b = (*owner).as_ref();
        if !region.contains(b.as_ptr() as usize, b.len()) {
            return Err(owner);
        }
        Ok(HeldSlice { region, owner })
    }

    pub fn len(&self) -> usize {
        (*self.owner).as_ref().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn pd(&self) -> &ProtectionDomain {
        self.region.pd()
    }

    pub(crate) fn sge(&self, len: u32) -> sys::ibv_sge {
        sys::ibv_sge {
            addr: (*self.owner).as_ref().as_ptr() as u64,
            length: len,
            lkey: self.region.mr.lkey,
        }
    }
}

/// An owned slice of a registered region: the only way to reach its bytes, and what work
/// requests take (by value) and give back in their completion. No two `MrBuf`s overlap.
pub struct MrBuf {
    mr: Arc<MrInner>,
    offset: usize,
    len: usize,
}

impl fmt::Debug for MrBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrBuf")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &self.mr.lkey)
            .finish()
    }
}

impl MrBuf {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Virtual address of the first byte: what a peer puts in an RDMA request.
    pub fn addr(&self) -> u64 {
        self.mr.base() as u64 + self.offset as u64
    }

    pub fn lkey(&self) -> u32 {
        self.mr.lkey
    }

    pub fn rkey(&self) -> u32 {
        self.mr.rkey
    }

    pub fn access(&self) -> Access {
        self.mr.access
    }

    pub fn pd(&self) -> &ProtectionDomain {
        &self.mr.pd
    }

    /// Offset of this buffer in its region.
    pub fn region_offset(&self) -> usize {
        self.offset
    }

    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `offset..offset+len` lies inside the region's live allocation (checked when
        // cut), no other MrBuf covers it, and `&self` forbids a concurrent `as_mut_slice`. While
        // posted, the MrBuf is owned by an in-flight table, so no reference can exist then.
        unsafe { std::slice::from_raw_parts(self.mr.base().add(self.offset), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.mr.base().add(self.offset), self.len) }
    }

    /// Splits into `[0, mid)` and `[mid, len)`.
    pub fn split_at(self, mid: usize) -> Result<(MrBuf, MrBuf), MrBuf> {
        if mid > self.len {
            return Err(self);
        }
        let right = MrBuf {
            mr: self.mr.clone(),
            offset: self.offset + mid,
            len: self.len - mid,
        };
        let left = MrBuf {
            mr: self.mr,
            offset: self.offset,
            len: mid,
        };
        Ok((left, right))
    }

    /// Joins two adjacent buffers of the same region (`self` first) back into one.
    pub fn join(self, next: MrBuf) -> Result<MrBuf, (MrBuf, MrBuf)> {
        if !Arc::ptr_eq(&self.mr, &next.mr) || self.offset + self.len != next.offset {
            return Err((self, next));
        }
        Ok(MrBuf {
            len: self.len + next.len,
            mr: self.mr,
            offset: self.offset,
        })
    }

    /// Descriptor of the whole buffer for a peer's RDMA READ / WRITE (see "Remote access" in the
    /// crate doc).
    pub fn remote(&self) -> RemoteBuf {
        RemoteBuf {
            addr: self.addr(),
            rkey: self.mr.rkey,
            len: self.len as u64,
        }
    }

    /// Descriptor of `range` of this buffer, `None` if out of bounds.
    pub fn remote_range(&self, range: Range<usize>) -> Option<RemoteBuf> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        Some(RemoteBuf {
            addr: self.addr() + range.start as u64,
            rkey: self.mr.rkey,
            len: (range.end - range.start) as u64,
        })
    }

    /// Scatter/gather entry for the first `len` bytes (`len <= self.len()`, checked by callers).
    /// A handle that keeps this buffer's region registered (see [`HeldSlice`]).
    pub fn region(&self) -> RegionHandle {
        RegionHandle {
            mr: self.mr.clone(),
        }
    }

    pub(crate) fn sge(&self, len: u32) -> sys::ibv_sge {
        sys::ibv_sge {
            addr: self.addr(),
            length: len,
            lkey: self.mr.lkey,
        }
    }
}

impl AsRef<[u8]> for MrBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for MrBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

/// Where in a peer's registered memory an RDMA READ / WRITE goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteBuf {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

impl RemoteBuf {
    /// The part `[offset, offset+len)`, `None` if out of bounds.
    pub fn slice(&self, offset: u64, len: u64) -> Option<RemoteBuf> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(RemoteBuf {
            addr: self.addr.checked_add(offset)?,
            rkey: self.rkey,
            len,
        })
    }
}
