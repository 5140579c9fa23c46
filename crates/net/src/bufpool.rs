//! `BufPool`: fixed-size, 4 KiB-aligned buffers carved from a few large slabs allocated once.
//!
//! One pool, three users (DESIGN.md, "Buffers"): shard reads land in pooled buffers, the decoder reads
//! them in place, and a response body is built from them with [`PooledBuf::into_bytes`]
//! (`Bytes::from_owner`), so the buffer goes back to the pool when hyper drops the body.
//!
//! Every slab reports its `(address, len)` ([`BufPool::slabs`]) and every buffer its slab and offset
//! ([`PooledBuf::slab`], [`PooledBuf::offset`]), so the verbs backend can register each slab once as a
//! memory region and derive any buffer's lkey/rkey and remote address without registering per I/O.
//!
//! # Memory and safety
//!
//! This is safe Rust (no `unsafe` outside `crates/verbs`). A slab is a zeroed `Vec<u8>` with 4 KiB of
//! slack, leaked with `Box::leak` so it lives for the rest of the process; the aligned part is cut with
//! `chunks_exact_mut` into disjoint `&'static mut [u8]` buffers, which the borrow checker lets the
//! pool hand out independently. Alignment comes from `<*const u8>::align_offset` (a safe function)
//! on the slab's address. The price is that a pool's memory is never returned to the allocator: a pool
//! is meant to be created once per process at start-up (as memory registered with an RDMA device
//! must stay put anyway), not per request. Zeroed allocations come from the OS lazily, so untouched
//! buffers cost no resident memory.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Alignment of every buffer (and of every slab).
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
}

/// A pool configuration that cannot work.
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
}

/// One slab: a contiguous, aligned region holding whole buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlabRegion {
    /// Address of the slab's first byte (aligned to [`ALIGN`]).
    pub addr: usize,
    /// Bytes of the slab.
    pub len: usize,
}

/// Counters of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

struct Slot {
    buf: &'static mut [u8],
    slab: usize,
    offset: usize,
}

struct Inner {
    free: Mutex<Vec<Slot>>,
    permits: Arc<Semaphore>,
    buf_size: usize,
    capacity: usize,
    slabs: Vec<SlabRegion>,
    in_use: AtomicUsize,
    waits: AtomicU64,
    gets: AtomicU64,
    exhausted: AtomicU64,
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

impl BufPool {
    /// Allocates the pool's slabs (once) and carves them into buffers.
    pub fn new(config: BufPoolConfig) -> Result<BufPool, BufPoolError> {
        let BufPoolConfig {
            buf_size,
            count,
            slab_bytes,
        } = config;
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
        let per_slab = (slab_bytes / buf_size).max(1);
        let mut free = Vec::with_capacity(count);
        let mut slabs = Vec::new();
        let mut left = count;
        while left > 0 {
            let n = left.min(per_slab);
            let len = n * buf_size;
            let raw: &'static mut [u8] = Box::leak(vec![0u8; len + ALIGN].into_boxed_slice());
            let skip = raw.as_ptr().align_offset(ALIGN);
            if skip > ALIGN {
                return Err(BufPoolError::Unaligned);
            }
            let slab = &mut raw[skip..skip + len];
            let index = slabs.len();
            slabs.push(SlabRegion {
                addr: slab.as_ptr() as usize,
                len,
            });
            for (i, buf) in slab.chunks_exact_mut(buf_size).enumerate() {
                free.push(Slot {
                    buf,
                    slab: index,
                    offset: i * buf_size,
                });
            }
            left -= n;
        }
        // Hand out low addresses first (pop takes from the end).
        free.reverse();
        Ok(BufPool {
            inner: Arc::new(Inner {
                free: Mutex::new(free),
                permits: Arc::new(Semaphore::new(count)),
                buf_size,
                capacity: count,
                slabs,
                in_use: AtomicUsize::new(0),
                waits: AtomicU64::new(0),
                gets: AtomicU64::new(0),
                exhausted: AtomicU64::new(0),
            }),
        })
    }

    /// Bytes of each buffer.
    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }

    /// The slabs, for registering each once as a memory region.
    pub fn slabs(&self) -> &[SlabRegion] {
        &self.inner.slabs
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

    fn take(&self, permit: OwnedSemaphorePermit) -> PooledBuf {
        // Invariant: a permit is held for every buffer out of the free list, so a permit implies a
        // free buffer.
        let slot = self
            .inner
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .expect("a pool permit always has a free buffer");
        self.inner.in_use.fetch_add(1, Ordering::Relaxed);
        self.inner.gets.fetch_add(1, Ordering::Relaxed);
        PooledBuf {
            slot: Some(slot),
            len: 0,
            pool: self.inner.clone(),
            _permit: permit,
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
        }
    }
}

/// A buffer borrowed from a [`BufPool`]; it returns itself to the pool when dropped.
///
/// It has a fixed capacity (the pool's buffer size) and a length: `Deref` gives the first `len` bytes
/// (the filled part); [`PooledBuf::spare_mut`] and [`PooledBuf::as_full_mut`] give room to fill.
pub struct PooledBuf {
    slot: Option<Slot>,
    len: usize,
    pool: Arc<Inner>,
    // Released after `Drop::drop` has put the buffer back, so a waiter always finds it.
    _permit: OwnedSemaphorePermit,
}

impl PooledBuf {
    fn slot(&self) -> &Slot {
        self.slot.as_ref().expect("slot present until drop")
    }

    fn slot_mut(&mut self) -> &mut Slot {
        self.slot.as_mut().expect("slot present until drop")
    }

    pub fn capacity(&self) -> usize {
        self.slot().buf.len()
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
        self.slot_mut().buf
    }

    /// The unfilled part.
    pub fn spare_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.slot_mut().buf[len..]
    }

    /// Appends `data` (at most the spare capacity; returns how much was copied).
    pub fn extend_from_slice(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.capacity() - self.len);
        let len = self.len;
        self.slot_mut().buf[len..len + n].copy_from_slice(&data[..n]);
        self.len += n;
        n
    }

    /// Index of the slab this buffer lives in (see [`BufPool::slabs`]).
    pub fn slab(&self) -> usize {
        self.slot().slab
    }

    /// Offset of this buffer in its slab.
    pub fn offset(&self) -> usize {
        self.slot().offset
    }

    /// Address of the buffer's first byte.
    pub fn addr(&self) -> usize {
        self.slot().buf.as_ptr() as usize
    }

    /// Turns the filled part into `Bytes` without copying; the buffer returns to the pool when the
    /// last clone of the `Bytes` is dropped.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

/// A drive reads a shard range straight into a pooled buffer ([`quarry_disk::Drive::read_shard_into`]):
/// it fills the buffer's first `len` bytes ([`PooledBuf::set_len`] first).
impl quarry_disk::ShardBuf for PooledBuf {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        self
    }

    fn into_bytes(self: Box<Self>) -> Bytes {
        PooledBuf::into_bytes(*self)
    }
}

impl std::ops::Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.slot().buf[..self.len]
    }
}

impl std::ops::DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.slot_mut().buf[..len]
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
            .field("slab", &self.slab())
            .field("offset", &self.offset())
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(slot);
            self.pool.in_use.fetch_sub(1, Ordering::Relaxed);
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
    }

    #[test]
    fn buffers_are_aligned_disjoint_and_inside_their_slab() {
        let p = pool(8192, 10, 3 * 8192);
        assert_eq!(p.slabs().len(), 4, "3+3+3+1 buffers");
        let bufs: Vec<PooledBuf> = (0..10).map(|_| p.try_get().unwrap()).collect();
        let mut addrs: Vec<usize> = bufs.iter().map(|b| b.addr()).collect();
        for b in &bufs {
            assert_eq!(b.addr() % ALIGN, 0);
            assert_eq!(b.capacity(), 8192);
            let s = p.slabs()[b.slab()];
            assert_eq!(s.addr % ALIGN, 0);
            assert_eq!(b.addr(), s.addr + b.offset());
            assert!(b.offset() + b.capacity() <= s.len);
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
}
