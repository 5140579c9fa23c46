//! [`BufPool`]: fixed-size, 4 KiB-aligned buffers carved from a few large slabs allocated once.
//!
//! One pool, three users (DESIGN.md, "Buffers"): shard reads land in pooled buffers, the decoder reads
//! them in place, and a response body is built from them with [`PooledBuf::into_bytes`]
//! (`Bytes::from_owner`), so the buffer goes back to the pool when hyper drops the body.
//!
//! # Registered pools
//!
//! With RDMA on, a pool is made by [`BufPool::registered`]: each slab is allocated and registered
//! once as a memory region of the device ([`quarry_verbs::ProtectionDomain::alloc_region`]), so every
//! buffer already has its lkey/rkey — nothing is registered per I/O. A registered buffer can be lent
//! to a peer for an RDMA WRITE ([`PooledBuf::remote`]), posted as the source or destination of a
//! local work request ([`PooledBuf::into_posted`], given back by [`Posted::restore`] from the
//! completion), and `Bytes` cut from one can be found again by address ([`BufPool::remote_of`]) so a
//! peer can RDMA-READ them. The TCP backend reads into the same buffers as plain memory.
//!
//! # Stripes
//!
//! A buffer can be split into pieces ([`PooledBuf::split`]), each a `PooledBuf` of its own, so several
//! shard reads can fill disjoint parts of one buffer at once (the GET's stripe buffer: one pooled
//! buffer holds the k chunks of a block). The buffer returns to the pool when its last piece (and
//! every `Bytes` made from the pieces) is dropped.
//!
//! # When the pool is empty
//!
//! [`BufPool::get`] waits (backpressure); [`BufPool::get_or_alloc`] takes a fresh allocation of the
//! same size instead (counted in [`BufPoolStats::heap_fallbacks`]), for users that must never wait
//! on the pool while they hold other buffers (that could deadlock). Such a buffer is not registered:
//! the verbs backend moves it over TCP.
//!
//! # Memory and safety
//!
//! This is safe Rust (no `unsafe` outside `crates/verbs`). A plain slab is one zeroed `BytesMut`; its
//! aligned part is cut with `split_to` into buffers that share the allocation, and pieces of a split
//! buffer are joined back with `unsplit`, which is O(1) (no copy) for the contiguous halves of one
//! allocation — the only kind this module ever joins (checked). Alignment comes from
//! `<*const u8>::align_offset` on the slab's address. Zeroed allocations come from the OS lazily, so
//! untouched plain buffers cost no resident memory; registered memory is pinned at once (the server
//! checks RLIMIT_MEMLOCK against it at start-up).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Buf, Bytes, BytesMut};
#[cfg(feature = "verbs")]
use quarry_verbs::{Access, MrBuf, ProtectionDomain, RemoteBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Default buffer size: a block's framed shard chunk (1 MiB of data at one data shard, plus its
/// 32-byte bitrot hash) fits one buffer, so a shard read lands in one buffer and reaches the
/// decoder without a copy whatever the set's shape.
pub const DEFAULT_BUF_SIZE: usize = (1 << 20) + ALIGN;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Alignment of every pooled buffer (and of every slab).
pub const ALIGN: usize = 4096;
/// Default bytes of one slab.
pub const DEFAULT_SLAB_BYTES: usize = 64 << 20;

/// How a pool is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufPoolConfig {
    /// Bytes of one buffer: a non-zero multiple of [`ALIGN`].
    pub buf_size: usize,
    /// Number of buffers in the pool.
    pub count: usize,
    /// Bytes of one slab (rounded down to whole buffers, at least one buffer per slab).
    pub slab_bytes: usize,
}

impl BufPoolConfig {
    pub fn new(buf_size: usize, count: usize) -> BufPoolConfig {
        BufPoolConfig {
            buf_size,
            count,
            slab_bytes: DEFAULT_SLAB_BYTES,
        }
    }

    /// As many buffers of `buf_size` as fit in `bytes` (at least one).
    pub fn with_bytes(buf_size: usize, bytes: u64) -> BufPoolConfig {
        let count = (bytes / buf_size.max(1) as u64).max(1);
        BufPoolConfig::new(buf_size, usize::try_from(count).unwrap_or(usize::MAX))
    }
}

/// A pool that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BufPoolError {
    #[error("buffer size {0} is not a non-zero multiple of {ALIGN}")]
    BadBufSize(usize),
    #[error("a pool needs at least one buffer")]
    Empty,
    #[error("pool of {count} buffers of {buf_size} bytes overflows the address space")]
    TooLarge { buf_size: usize, count: usize },
    #[error("the allocator returned memory that cannot be aligned to {ALIGN} bytes")]
    Unaligned,
    /// Allocating or registering a slab with the RDMA device failed.
    #[error("cannot register the pool's memory with the RDMA device: {0}")]
    Register(String),
}

/// One slab: a contiguous, aligned region holding whole buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlabRegion {
    /// Address of the slab's first byte (aligned to [`ALIGN`]).
    pub addr: usize,
    /// Bytes of the slab.
    pub len: usize,
    /// The memory region's rkey when the slab is registered with an RDMA device.
    pub rkey: Option<u32>,
}

impl SlabRegion {
    fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= self.addr + self.len)
    }
}

/// Counters of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BufPoolStats {
    pub buf_size: usize,
    pub capacity: usize,
    pub in_use: usize,
    /// `get` calls that had to wait for a buffer.
    pub waits: u64,
    /// Buffers handed out in total.
    pub gets: u64,
    /// `try_get` calls that found the pool empty.
    pub exhausted: u64,
    /// `get_or_alloc` calls served by a fresh allocation because the pool was empty.
    pub heap_fallbacks: u64,
    /// Buffers given up for good (a posted buffer whose completion never came back): the pool is
    /// that much smaller from then on. Never expected; counted so it would be seen.
    pub lost: u64,
    /// Bytes registered with an RDMA device (0 for a plain pool).
    pub registered_bytes: u64,
}

/// The memory of a buffer or of a piece of one.
enum Mem {
    /// Part of a plain slab: a `BytesMut` view of one allocation, never grown (its length is its
    /// capacity).
    Plain(BytesMut),
    /// Part of a registered slab.
    #[cfg(feature = "verbs")]
    Registered(MrBuf),
}

impl Mem {
    fn len(&self) -> usize {
        match self {
            Mem::Plain(b) => b.len(),
            #[cfg(feature = "verbs")]
            Mem::Registered(b) => b.len(),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Mem::Plain(b) => b,
            #[cfg(feature = "verbs")]
            Mem::Registered(b) => b.as_slice(),
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Mem::Plain(b) => b,
            #[cfg(feature = "verbs")]
            Mem::Registered(b) => b.as_mut_slice(),
        }
    }

    /// `[0, at)` and `[at, len)`; `0 < at < len`.
    fn split_at(self, at: usize) -> (Mem, Mem) {
        debug_assert!(at > 0 && at < self.len());
        match self {
            Mem::Plain(mut b) => {
                let rest = b.split_off(at);
                (Mem::Plain(b), Mem::Plain(rest))
            }
            #[cfg(feature = "verbs")]
            Mem::Registered(b) => match b.split_at(at) {
                Ok((l, r)) => (Mem::Registered(l), Mem::Registered(r)),
                // `at` is in bounds (checked by the caller): cannot happen. Keep the memory whole
                // rather than lose it.
                Err(b) => (Mem::Registered(b), Mem::Plain(BytesMut::new())),
            },
        }
    }

    /// Joins `self` and the `next` piece of the same allocation back into one, without copying.
    fn join(self, next: Mem) -> Result<Mem, (Mem, Mem)> {
        match (self, next) {
            (Mem::Plain(mut a), Mem::Plain(b)) => {
                let (pa, pb) = (a.as_ptr() as usize, b.as_ptr() as usize);
                if pa + a.len() != pb || b.is_empty() || a.is_empty() {
                    return Err((Mem::Plain(a), Mem::Plain(b)));
                }
                a.unsplit(b);
                // Contiguous halves of one allocation rejoin in place (see the module doc).
                debug_assert_eq!(a.as_ptr() as usize, pa, "BytesMut::unsplit copied");
                Ok(Mem::Plain(a))
            }
            #[cfg(feature = "verbs")]
            (Mem::Registered(a), Mem::Registered(b)) => a
                .join(b)
                .map(Mem::Registered)
                .map_err(|(a, b)| (Mem::Registered(a), Mem::Registered(b))),
            #[cfg(feature = "verbs")]
            (a, b) => Err((a, b)),
        }
    }
}

struct Slot {
    mem: Mem,
    slab: usize,
}

struct Inner {
    free: Mutex<Vec<Slot>>,
    permits: Arc<Semaphore>,
    buf_size: usize,
    capacity: usize,
    slabs: Vec<SlabRegion>,
    /// Handles of the slabs' regions when registered, index for index with `slabs`.
    #[cfg(feature = "verbs")]
    regions: Vec<quarry_verbs::RegionHandle>,
    registered_bytes: u64,
    in_use: AtomicUsize,
    waits: AtomicU64,
    gets: AtomicU64,
    exhausted: AtomicU64,
    heap_fallbacks: AtomicU64,
    lost: AtomicU64,
}

/// A bounded pool of aligned buffers. Cheap to clone (shared).
#[derive(Clone)]
pub struct BufPool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for BufPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufPool")
            .field("stats", &self.stats())
            .finish()
    }
}

fn check_config(config: &BufPoolConfig) -> Result<usize, BufPoolError> {
    let BufPoolConfig {
        buf_size,
        count,
        slab_bytes,
    } = *config;
    if buf_size == 0 || buf_size % ALIGN != 0 {
        return Err(BufPoolError::BadBufSize(buf_size));
    }
    if count == 0 {
        return Err(BufPoolError::Empty);
    }
    if buf_size
        .checked_mul(count)
        .is_none_or(|total| total > isize::MAX as usize / 2)
    {
        return Err(BufPoolError::TooLarge { buf_size, count });
    }
    Ok((slab_bytes / buf_size).max(1))
}

impl BufPool {
    /// Allocates the pool's slabs (once) and carves them into buffers.
    pub fn new(config: BufPoolConfig) -> Result<BufPool, BufPoolError> {
        let per_slab = check_config(&config)?;
        let BufPoolConfig {
            buf_size, count, ..
        } = config;
        let mut free = Vec::with_capacity(count);
        let mut slabs = Vec::new();
        let mut left = count;
        while left > 0 {
            let n = left.min(per_slab);
            let len = n * buf_size;
            let mut raw = BytesMut::zeroed(len + ALIGN);
            let skip = raw.as_ptr().align_offset(ALIGN);
            if skip > ALIGN {
                return Err(BufPoolError::Unaligned);
            }
            raw.advance(skip);
            raw.truncate(len);
            let index = slabs.len();
            slabs.push(SlabRegion {
                addr: raw.as_ptr() as usize,
                len,
                rkey: None,
            });
            for _ in 0..n {
                free.push(Slot {
                    mem: Mem::Plain(raw.split_to(buf_size)),
                    slab: index,
                });
            }
            left -= n;
        }
        Ok(BufPool::from_slots(buf_size, count, free, slabs, 0))
    }

    /// Like [`BufPool::new`], every slab allocated and registered once with `pd` (`access`: what
    /// peers and local work requests may do with the buffers).
    #[cfg(feature = "verbs")]
    pub fn registered(
        config: BufPoolConfig,
        pd: &ProtectionDomain,
        access: Access,
    ) -> Result<BufPool, BufPoolError> {
        let per_slab = check_config(&config)?;
        let BufPoolConfig {
            buf_size, count, ..
        } = config;
        let mut free = Vec::with_capacity(count);
        let mut slabs = Vec::new();
        let mut left = count;
        let mut registered = 0u64;
        let mut regions = Vec::new();
        while left > 0 {
            let n = left.min(per_slab);
            let len = n * buf_size;
            let region = pd
                .alloc_region(len, access)
                .map_err(|e| BufPoolError::Register(e.to_string()))?;
            let rkey = region.rkey();
            let bufs = region
                .into_bufs(buf_size)
                .map_err(|e| BufPoolError::Register(e.to_string()))?;
            let index = slabs.len();
            let addr = bufs.first().map_or(0, |b| b.addr() as usize);
            if addr % ALIGN != 0 {
                return Err(BufPoolError::Unaligned);
            }
            slabs.push(SlabRegion {
                addr,
                len,
                rkey: Some(rkey),
            });
            if let Some(first) = bufs.first() {
                regions.push(first.region());
            }
            registered += len as u64;
            free.extend(bufs.into_iter().map(|b| Slot {
                mem: Mem::Registered(b),
                slab: index,
            }));
            left -= n;
        }
        let mut pool = BufPool::from_slots(buf_size, count, free, slabs, registered);
        if let Some(inner) = Arc::get_mut(&mut pool.inner) {
            inner.regions = regions;
        }
        Ok(pool)
    }

    fn from_slots(
        buf_size: usize,
        count: usize,
        mut free: Vec<Slot>,
        slabs: Vec<SlabRegion>,
        registered_bytes: u64,
    ) -> BufPool {
        // Hand out low addresses first (pop takes from the end).
        free.reverse();
        BufPool {
            inner: Arc::new(Inner {
                free: Mutex::new(free),
                permits: Arc::new(Semaphore::new(count)),
                buf_size,
                capacity: count,
                slabs,
                #[cfg(feature = "verbs")]
                regions: Vec::new(),
                registered_bytes,
                in_use: AtomicUsize::new(0),
                waits: AtomicU64::new(0),
                gets: AtomicU64::new(0),
                exhausted: AtomicU64::new(0),
                heap_fallbacks: AtomicU64::new(0),
                lost: AtomicU64::new(0),
            }),
        }
    }

    /// Bytes of each buffer.
    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }

    /// The slabs (with their rkeys when registered).
    pub fn slabs(&self) -> &[SlabRegion] {
        &self.inner.slabs
    }

    /// Whether the slabs are registered with an RDMA device.
    pub fn is_registered(&self) -> bool {
        self.inner.registered_bytes > 0
    }

    /// Whether `data` lies inside one of this pool's slabs (e.g. `Bytes` cut from a pooled buffer).
    pub fn contains(&self, data: &[u8]) -> bool {
        let addr = data.as_ptr() as usize;
        self.inner
            .slabs
            .iter()
            .any(|s| s.contains(addr, data.len()))
    }

    /// Where `data` is for a peer's RDMA READ, if it lies inside one registered slab of this pool.
    /// The caller keeps `data` (and so the buffer under it) alive and unchanged until the peer is
    /// known to be done with it.
    #[cfg(feature = "verbs")]
    pub fn remote_of(&self, data: &[u8]) -> Option<RemoteBuf> {
        let addr = data.as_ptr() as usize;
        let slab = self
            .inner
            .slabs
            .iter()
            .find(|s| s.contains(addr, data.len()))?;
        Some(RemoteBuf {
            addr: addr as u64,
            rkey: slab.rkey?,
            len: data.len() as u64,
        })
    }

    /// `data` held for a local work request that reads it (the source of an RDMA WRITE),
    /// if it lies inside one registered slab of this pool: sent from where it is, no copy.
    /// `Err(data)` otherwise.
    #[cfg(feature = "verbs")]
    pub fn held(&self, data: Bytes) -> Result<quarry_verbs::HeldSlice, Bytes> {
        let addr = data.as_ptr() as usize;
        let Some(i) = self
            .inner
            .slabs
            .iter()
            .position(|s| s.contains(addr, data.len()))
        else {
            return Err(data);
        };
        let Some(region) = self.inner.regions.get(i) else {
            return Err(data);
        };
        // The same bytes come back when the slice is refused: `data` is moved in and out.
        let copy = data.clone();
        quarry_verbs::HeldSlice::new(region.clone(), Box::new(data)).map_err(|_| copy)
    }

    /// A buffer, waiting while all are in use.
    pub async fn get(&self) -> PooledBuf {
        let permit = match self.inner.permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                self.inner.waits.fetch_add(1, Ordering::Relaxed);
                // The semaphore is never closed.
                self.inner
                    .permits
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("pool semaphore is never closed")
            }
        };
        self.take(permit)
    }

    /// A buffer if one is free now.
    pub fn try_get(&self) -> Option<PooledBuf> {
        match self.inner.permits.clone().try_acquire_owned() {
            Ok(p) => Some(self.take(p)),
            Err(TryAcquireError::NoPermits) | Err(TryAcquireError::Closed) => {
                self.inner.exhausted.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// A pooled buffer if one is free now, else a fresh (unregistered) allocation of the same size.
    pub fn get_or_alloc(&self) -> PooledBuf {
        match self.try_get() {
            Some(b) => b,
            None => {
                self.inner.heap_fallbacks.fetch_add(1, Ordering::Relaxed);
                PooledBuf::heap(self.inner.buf_size)
            }
        }
    }

    /// Buffers that hold `len` bytes between them (at least one, for a 0-byte read), each from
    /// [`BufPool::get_or_alloc`]: never waits.
    pub fn get_or_alloc_for(&self, len: usize) -> Vec<PooledBuf> {
        let n = len.div_ceil(self.inner.buf_size).max(1);
        (0..n).map(|_| self.get_or_alloc()).collect()
    }

    fn take(&self, permit: OwnedSemaphorePermit) -> PooledBuf {
        // Invariant: a permit is held for every buffer out of the free list, so a permit implies a
        // free buffer.
        let slot = lock(&self.inner.free)
            .pop()
            .expect("a pool permit always has a free buffer");
        self.inner.in_use.fetch_add(1, Ordering::Relaxed);
        self.inner.gets.fetch_add(1, Ordering::Relaxed);
        PooledBuf {
            mem: Some(slot.mem),
            len: 0,
            home: Home::Pool {
                pool: self.inner.clone(),
                slab: slot.slab,
                _permit: permit,
            },
        }
    }

    pub fn stats(&self) -> BufPoolStats {
        let i = &self.inner;
        BufPoolStats {
            buf_size: i.buf_size,
            capacity: i.capacity,
            in_use: i.in_use.load(Ordering::Relaxed),
            waits: i.waits.load(Ordering::Relaxed),
            gets: i.gets.load(Ordering::Relaxed),
            exhausted: i.exhausted.load(Ordering::Relaxed),
            heap_fallbacks: i.heap_fallbacks.load(Ordering::Relaxed),
            lost: i.lost.load(Ordering::Relaxed),
            registered_bytes: i.registered_bytes,
        }
    }
}

/// Where a buffer's memory goes when it is dropped.
enum Home {
    /// A whole buffer of a pool: back to its free list.
    Pool {
        pool: Arc<Inner>,
        slab: usize,
        // Released after `Drop::drop` has put the buffer back, so a waiter always finds it.
        _permit: OwnedSemaphorePermit,
    },
    /// A piece of a split buffer: back to its stripe, which rejoins the pieces.
    Piece { stripe: Arc<Stripe>, index: usize },
    /// A buffer allocated on its own: freed.
    Heap,
    /// Nothing (its memory was moved out).
    Gone,
}

impl Home {
    /// Takes `mem` back (or, with `None`, gives the buffer up for good).
    fn put(self, mem: Option<Mem>) {
        match self {
            Home::Pool {
                pool,
                slab,
                _permit,
            } => {
                match mem {
                    Some(mem) => lock(&pool.free).push(Slot { mem, slab }),
                    None => {
                        // The memory is gone: so is its permit, or a waiter would find no buffer.
                        pool.lost.fetch_add(1, Ordering::Relaxed);
                        _permit.forget();
                        tracing::error!("a pooled buffer was lost: the pool has one buffer fewer");
                    }
                }
                pool.in_use.fetch_sub(1, Ordering::Relaxed);
            }
            Home::Piece { stripe, index } => stripe.put(index, mem),
            Home::Heap | Home::Gone => {}
        }
    }
}

/// The pieces of a split buffer, collected as they come back; the whole buffer goes home when the
/// last one is back.
struct Stripe {
    state: Mutex<StripeState>,
}

struct StripeState {
    parts: Vec<Option<Mem>>,
    missing: usize,
    /// Where the whole buffer goes (taken when it does).
    home: Option<Home>,
}

impl Stripe {
    fn put(&self, index: usize, mem: Option<Mem>) {
        let done = {
            let mut s = lock(&self.state);
            match mem {
                Some(m) => {
                    s.parts[index] = Some(m);
                    s.missing -= 1;
                    if s.missing > 0 {
                        return;
                    }
                    let home = s.home.take();
                    let parts = std::mem::take(&mut s.parts);
                    home.map(|h| (h, parts))
                }
                None => {
                    // A piece was lost: the whole can never be rejoined.
                    s.missing -= 1;
                    s.home.take().map(|h| (h, Vec::new()))
                }
            }
        };
        let Some((home, parts)) = done else { return };
        let mut joined: Option<Mem> = None;
        let mut ok = !parts.is_empty();
        for p in parts {
            let Some(p) = p else {
                ok = false;
                break;
            };
            match joined.take() {
                None => joined = Some(p),
                Some(j) => match j.join(p) {
                    Ok(m) => joined = Some(m),
                    Err(_) => {
                        ok = false;
                        break;
                    }
                },
            }
        }
        if !ok {
            tracing::error!("the pieces of a split buffer did not rejoin");
            joined = None;
        }
        home.put(joined);
    }
}

impl Drop for Stripe {
    fn drop(&mut self) {
        // Every piece holds the stripe, so this runs after the last piece was dropped: if the
        // whole has not gone home, a piece was lost.
        let s = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(home) = s.home.take() {
            home.put(None);
        }
    }
}

/// A buffer borrowed from a [`BufPool`] (or a piece of one, or a stand-alone allocation); it returns
/// itself to where it came from when dropped.
///
/// It has a fixed capacity and a length: `Deref` gives the first `len` bytes (the filled part);
/// [`PooledBuf::spare_mut`] and [`PooledBuf::as_full_mut`] give room to fill.
pub struct PooledBuf {
    mem: Option<Mem>,
    len: usize,
    home: Home,
}

impl PooledBuf {
    /// A stand-alone buffer of `capacity` zeroed bytes, not from any pool.
    pub fn heap(capacity: usize) -> PooledBuf {
        PooledBuf {
            mem: Some(Mem::Plain(BytesMut::zeroed(capacity))),
            len: 0,
            home: Home::Heap,
        }
    }

    fn mem(&self) -> &Mem {
        self.mem.as_ref().expect("memory present until drop")
    }

    fn mem_mut(&mut self) -> &mut Mem {
        self.mem.as_mut().expect("memory present until drop")
    }

    pub fn capacity(&self) -> usize {
        self.mem.as_ref().map_or(0, Mem::len)
    }

    /// Sets the filled length. The bytes up to it hold whatever was last written there (zeros for a
    /// fresh buffer, a previous user's data otherwise): set it after filling.
    ///
    /// # Panics
    /// If `len` exceeds the capacity (a caller bug, never input-dependent in this crate).
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity(),
            "PooledBuf::set_len({len}) beyond capacity {}",
            self.capacity()
        );
        self.len = len;
    }

    /// The whole buffer, filled or not.
    pub fn as_full_mut(&mut self) -> &mut [u8] {
        self.mem_mut().as_mut_slice()
    }

    /// The unfilled part.
    pub fn spare_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.mem_mut().as_mut_slice()[len..]
    }

    /// Appends `data` (at most the spare capacity; returns how much was copied).
    pub fn extend_from_slice(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.capacity() - self.len);
        let len = self.len;
        self.mem_mut().as_mut_slice()[len..len + n].copy_from_slice(&data[..n]);
        self.len += n;
        debug_assert!(self.len <= self.capacity());
        n
    }

    /// Address of the buffer's first byte.
    pub fn addr(&self) -> usize {
        self.mem().as_slice().as_ptr() as usize
    }

    /// Whether the buffer is registered memory (lendable to a peer, postable).
    pub fn is_registered(&self) -> bool {
        match self.mem {
            #[cfg(feature = "verbs")]
            Some(Mem::Registered(_)) => true,
            _ => false,
        }
    }

    /// Whether the buffer came from a pool (or is a piece of one that did), as opposed to a
    /// stand-alone allocation ([`BufPool::get_or_alloc`] with the pool empty).
    pub fn is_pooled(&self) -> bool {
        !matches!(self.home, Home::Heap)
    }

    /// Descriptor of the bytes `range` of the buffer (filled or not) for a peer's RDMA READ or
    /// WRITE; `None` if the buffer is not registered or the range is out of bounds.
    #[cfg(feature = "verbs")]
    pub fn remote(&self, range: std::ops::Range<usize>) -> Option<RemoteBuf> {
        match self.mem.as_ref()? {
            Mem::Registered(b) => b.remote_range(range),
            Mem::Plain(_) => None,
        }
    }

    /// Cuts the buffer into pieces of `sizes` bytes (in order, each at least one byte; the
    /// capacity left over is kept aside), each a `PooledBuf` of its own with length 0. The
    /// buffer goes home when the last piece does. `Err(self)` if the sizes do not fit.
    pub fn split(mut self, sizes: &[usize]) -> Result<Vec<PooledBuf>, PooledBuf> {
        let total = sizes
            .iter()
            .try_fold(0usize, |a, &s| if s == 0 { None } else { a.checked_add(s) });
        let capacity = self.capacity();
        let Some(total) = total.filter(|&t| t <= capacity && !sizes.is_empty()) else {
            return Err(self);
        };
        let Some(mut rest) = self.mem.take() else {
            return Err(self);
        };
        let mut parts = Vec::with_capacity(sizes.len() + 1);
        for (i, &s) in sizes.iter().enumerate() {
            let last = i + 1 == sizes.len();
            if last && s == rest.len() {
                parts.push(rest);
                rest = Mem::Plain(BytesMut::new());
                break;
            }
            let (piece, r) = rest.split_at(s);
            parts.push(piece);
            rest = r;
        }
        debug_assert!(
            parts.len() == sizes.len() && parts.iter().zip(sizes).all(|(p, &s)| p.len() == s),
            "every piece has the size asked for"
        );
        let leftover = (total < capacity).then_some(rest);
        let n = sizes.len();
        let home = std::mem::replace(&mut self.home, Home::Gone);
        let mut slots: Vec<Option<Mem>> = (0..n).map(|_| None).collect();
        slots.extend(leftover.map(Some));
        let stripe = Arc::new(Stripe {
            state: Mutex::new(StripeState {
                parts: slots,
                missing: n,
                home: Some(home),
            }),
        });
        Ok(parts
            .into_iter()
            .enumerate()
            .map(|(index, mem)| PooledBuf {
                mem: Some(mem),
                len: 0,
                home: Home::Piece {
                    stripe: stripe.clone(),
                    index,
                },
            })
            .collect())
    }

    /// Cuts the buffer into `n` pieces of `size` bytes (see [`PooledBuf::split`]).
    pub fn split_even(self, size: usize, n: usize) -> Result<Vec<PooledBuf>, PooledBuf> {
        self.split(&vec![size; n])
    }

    /// The registered memory of the buffer, to post in a work request (which takes it by value),
    /// and a ticket that makes it a `PooledBuf` again when the completion gives it back
    /// ([`Posted::restore`]). `Err(self)` for a buffer that is not registered.
    #[cfg(feature = "verbs")]
    pub fn into_posted(mut self) -> Result<(MrBuf, Posted), PooledBuf> {
        match self.mem.take() {
            Some(Mem::Registered(b)) => {
                let home = std::mem::replace(&mut self.home, Home::Gone);
                Ok((
                    b,
                    Posted {
                        home: Some(home),
                        len: self.len,
                    },
                ))
            }
            other => {
                self.mem = other;
                Err(self)
            }
        }
    }

    /// Turns the filled part into `Bytes` without copying; the buffer returns home when the last
    /// clone of the `Bytes` is dropped.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

/// A registered buffer out in a work request ([`PooledBuf::into_posted`]). Dropped without
/// [`Posted::restore`] (its completion never gave the memory back), the buffer is given up and
/// counted in [`BufPoolStats::lost`].
#[cfg(feature = "verbs")]
pub struct Posted {
    home: Option<Home>,
    len: usize,
}

#[cfg(feature = "verbs")]
impl Posted {
    /// The buffer again, with the memory its completion gave back (which must be the memory
    /// [`PooledBuf::into_posted`] gave out).
    pub fn restore(mut self, mem: MrBuf) -> PooledBuf {
        let len = self.len.min(mem.len());
        PooledBuf {
            mem: Some(Mem::Registered(mem)),
            len,
            home: self.home.take().unwrap_or(Home::Heap),
        }
    }
}

#[cfg(feature = "verbs")]
impl Drop for Posted {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.put(None);
        }
    }
}

#[cfg(feature = "verbs")]
impl std::fmt::Debug for Posted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Posted").field("len", &self.len).finish()
    }
}

impl std::ops::Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.mem {
            Some(m) => &m.as_slice()[..self.len],
            None => &[],
        }
    }
}

impl std::ops::DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        match &mut self.mem {
            Some(m) => &mut m.as_mut_slice()[..len],
            None => &mut [],
        }
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for PooledBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuf")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .field("registered", &self.is_registered())
            .field("pooled", &self.is_pooled())
            .finish()
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let mem = self.mem.take();
        let home = std::mem::replace(&mut self.home, Home::Gone);
        if mem.is_some() || !matches!(home, Home::Gone) {
            home.put(mem);
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pool(buf: usize, count: usize, slab: usize) -> BufPool {
        BufPool::new(BufPoolConfig {
            buf_size: buf,
            count,
            slab_bytes: slab,
        })
        .unwrap()
    }

    fn slab_of(p: &BufPool, addr: usize, len: usize) -> Option<usize> {
        p.slabs().iter().position(|s| s.contains(addr, len))
    }

    #[test]
    fn config_is_validated() {
        assert_eq!(
            BufPool::new(BufPoolConfig::new(1000, 4)).unwrap_err(),
            BufPoolError::BadBufSize(1000)
        );
        assert_eq!(
            BufPool::new(BufPoolConfig::new(0, 4)).unwrap_err(),
            BufPoolError::BadBufSize(0)
        );
        assert_eq!(
            BufPool::new(BufPoolConfig::new(4096, 0)).unwrap_err(),
            BufPoolError::Empty
        );
        assert!(matches!(
            BufPool::new(BufPoolConfig::new(1 << 30, usize::MAX / 2)),
            Err(BufPoolError::TooLarge { .. })
        ));
        assert_eq!(BufPoolConfig::with_bytes(4096, 10 * 4096 + 5).count, 10);
        assert_eq!(BufPoolConfig::with_bytes(4096, 5).count, 1);
    }

    #[test]
    fn buffers_are_aligned_disjoint_and_inside_their_slab() {
        let p = pool(8192, 10, 3 * 8192);
        assert_eq!(p.slabs().len(), 4, "3+3+3+1 buffers");
        assert!(!p.is_registered());
        let bufs: Vec<PooledBuf> = (0..10).map(|_| p.try_get().unwrap()).collect();
        let mut addrs: Vec<usize> = bufs.iter().map(|b| b.addr()).collect();
        for b in &bufs {
            assert_eq!(b.addr() % ALIGN, 0);
            assert_eq!(b.capacity(), 8192);
            assert!(slab_of(&p, b.addr(), b.capacity()).is_some());
            assert!(b.is_pooled() && !b.is_registered());
        }
        for s in p.slabs() {
            assert_eq!(s.addr % ALIGN, 0);
            assert_eq!(s.rkey, None);
        }
        addrs.sort();
        addrs.dedup();
        assert_eq!(addrs.len(), 10);
        assert!(p.try_get().is_none());
        assert_eq!(p.stats().in_use, 10);
        assert_eq!(p.stats().exhausted, 1);
        drop(bufs);
        assert_eq!(p.stats().in_use, 0);
    }

    #[test]
    fn fill_and_read() {
        let p = pool(4096, 1, 4096);
        let mut b = p.try_get().unwrap();
        assert!(b.is_empty());
        assert_eq!(b.extend_from_slice(b"hello"), 5);
        assert_eq!(&b[..], b"hello");
        b.spare_mut()[..3].copy_from_slice(b"abc");
        b.set_len(8);
        assert_eq!(&b[..], b"helloabc");
        assert_eq!(b.extend_from_slice(&[0u8; 5000]), 4096 - 8);
        assert_eq!(b.len(), 4096);
    }

    #[tokio::test]
    async fn into_bytes_returns_the_buffer_when_the_last_clone_drops() {
        let p = pool(4096, 1, 4096);
        let mut b = p.get().await;
        let addr = b.addr();
        b.extend_from_slice(b"body bytes");
        let bytes = b.into_bytes();
        assert_eq!(bytes.as_ptr() as usize, addr, "no copy");
        assert!(p.contains(&bytes));
        assert!(!p.contains(b"elsewhere"));
        let clone = bytes.slice(5..);
        assert_eq!(&clone[..], b"bytes");
        drop(bytes);
        assert_eq!(p.stats().in_use, 1);
        assert!(p.try_get().is_none());
        drop(clone);
        assert_eq!(p.stats().in_use, 0);
        assert_eq!(p.try_get().unwrap().addr(), addr);
    }

    #[tokio::test]
    async fn get_waits_when_exhausted() {
        let p = pool(4096, 2, 1 << 20);
        let a = p.get().await;
        let _b = p.get().await;
        let p2 = p.clone();
        let waiter = tokio::spawn(async move { p2.get().await.addr() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        let a_addr = a.addr();
        drop(a);
        let got = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, a_addr);
        let s = p.stats();
        assert_eq!(s.waits, 1);
        assert_eq!(s.gets, 3);
    }

    #[test]
    fn get_or_alloc_for_covers_the_length_without_waiting() {
        let p = BufPool::new(BufPoolConfig::new(4096, 2)).unwrap();
        assert_eq!(p.get_or_alloc_for(0).len(), 1);
        assert_eq!(p.get_or_alloc_for(4096).len(), 1);
        // Three buffers from a pool of two: the third is a fresh allocation, not a wait.
        let three = p.get_or_alloc_for(2 * 4096 + 1);
        assert_eq!(three.len(), 3);
        assert_eq!(p.stats().heap_fallbacks, 1);
    }

    #[test]
    fn get_or_alloc_falls_back_to_a_fresh_buffer_when_empty() {
        let p = pool(4096, 1, 4096);
        let a = p.get_or_alloc();
        assert!(a.is_pooled());
        let mut b = p.get_or_alloc();
        assert!(!b.is_pooled(), "pool empty: a stand-alone buffer");
        assert_eq!(b.capacity(), 4096);
        b.extend_from_slice(b"x");
        assert!(!p.contains(&b));
        assert_eq!(p.stats().heap_fallbacks, 1);
        drop((a, b));
        assert_eq!(p.stats().in_use, 0);
        assert!(p.try_get().is_some());
    }

    #[test]
    fn split_pieces_are_disjoint_and_the_buffer_returns_after_the_last_one() {
        let p = pool(16384, 1, 16384);
        let b = p.try_get().unwrap();
        let base = b.addr();
        let mut pieces = b.split(&[1000, 5000, 33]).unwrap();
        assert_eq!(pieces.len(), 3);
        let mut at = base;
        for (i, piece) in pieces.iter_mut().enumerate() {
            assert_eq!(piece.addr(), at, "piece {i} follows the previous one");
            at += piece.capacity();
            assert!(piece.is_empty());
            let cap = piece.capacity();
            piece.as_full_mut().fill(i as u8 + 1);
            piece.set_len(cap);
        }
        assert_eq!(
            pieces.iter().map(|p| p.capacity()).collect::<Vec<_>>(),
            [1000, 5000, 33]
        );
        let third = pieces.pop().unwrap().into_bytes();
        let second = pieces.pop().unwrap();
        let first = pieces.pop().unwrap().into_bytes().slice(10..20);
        assert!(p.contains(&third) && p.contains(&first));
        assert_eq!(&first[..], &[1u8; 10]);
        assert_eq!(&third[..], &[3u8; 33]);
        assert_eq!(&second[..], &[2u8; 5000][..]);
        assert_eq!(p.stats().in_use, 1);
        drop(second);
        drop(third);
        assert!(p.try_get().is_none(), "a slice of the first piece is alive");
        drop(first);
        assert_eq!(p.stats().in_use, 0);
        let again = p.try_get().unwrap();
        assert_eq!(again.addr(), base, "rejoined in place");
        assert_eq!(again.capacity(), 16384, "whole again, leftover included");
        // A piece can be split again.
        let mut halves = again.split_even(8192, 2).unwrap();
        let quarters = halves.pop().unwrap().split_even(4096, 2).unwrap();
        assert_eq!(quarters[0].addr(), base + 8192);
        drop((halves, quarters));
        assert_eq!(p.try_get().unwrap().capacity(), 16384);
    }

    #[test]
    fn split_refuses_sizes_that_do_not_fit() {
        let p = pool(4096, 1, 4096);
        let b = p.try_get().unwrap();
        let b = b.split(&[4000, 97]).unwrap_err();
        let b = b.split(&[0, 10]).unwrap_err();
        let b = b.split(&[]).unwrap_err();
        assert_eq!(b.capacity(), 4096);
        let whole = b.split(&[4096]).unwrap();
        assert_eq!(whole[0].capacity(), 4096);
        drop(whole);
        assert_eq!(p.stats().in_use, 0);
        // Stand-alone buffers split and rejoin too.
        let h = PooledBuf::heap(100).split_even(50, 2).unwrap();
        assert_eq!(h[1].addr(), h[0].addr() + 50);
    }
}
