//! A hashing thread shared by every stream in flight: the blocks of up to 16 streams go through
//! the SIMD lanes together, and each stream's caller does its other work meanwhile.
//!
//! A stream hands over a chunk of whole blocks with its running state and gets the new state
//! back; it has at most one chunk in flight, so the server holds at most one chunk per stream
//! (memory stays bounded by the callers). Small chunks (under [`INLINE_MAX`]) are hashed on the
//! caller's thread: a hand-over costs more than hashing them.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};

use bytes::{Buf, Bytes};
use tokio::sync::oneshot;

use crate::{compress_many, scalar, Kernel, Md5, BLOCK_LEN};

/// Chunks shorter than this are hashed by the caller.
pub const INLINE_MAX: usize = 64 * 1024;

/// Blocks of each stream per pass before the server looks for newly arrived streams (16 KiB:
/// a newcomer waits tens of microseconds at most to get a lane).
const ROUND_BLOCKS: usize = 256;

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// No more jobs are taken: the server was dropped, or its thread ended.
    closed: bool,
}

struct Job {
    state: [u32; 4],
    data: Bytes,
    done: oneshot::Sender<[u32; 4]>,
}

/// The hashing thread and its queue. Dropping it lets the thread finish the jobs it has and end.
pub struct Md5Server {
    shared: Option<Arc<Shared>>,
    kernel: Kernel,
}

impl std::fmt::Debug for Md5Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Md5Server")
            .field("kernel", &self.kernel)
            .field("threaded", &self.shared.is_some())
            .finish()
    }
}

impl Md5Server {
    /// The process's server, started on first use with the detected kernel.
    pub fn global() -> &'static Md5Server {
        static SERVER: OnceLock<Md5Server> = OnceLock::new();
        SERVER.get_or_init(|| Md5Server::new(Kernel::detect()))
    }

    /// A server over `kernel` (the portable one if the CPU lacks it). With the portable
    /// kernel there is nothing to batch, and one thread would serialise streams that each
    /// caller's own core could hash: streams are then hashed by their callers, as [`Md5`] does.
    pub fn new(kernel: Kernel) -> Md5Server {
        let kernel = if kernel.is_supported() {
            kernel
        } else {
            Kernel::Scalar
        };
        if kernel == Kernel::Scalar {
            return Md5Server {
                shared: None,
                kernel,
            };
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        });
        let worker = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("md5x".into())
            .spawn(move || serve(&worker, kernel));
        Md5Server {
            // Without a thread, callers hash inline.
            shared: spawned.is_ok().then_some(shared),
            kernel,
        }
    }

    /// The kernel the server runs.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// A new stream hashed through this server.
    pub fn stream(&self) -> StreamHasher {
        StreamHasher {
            shared: self.shared.clone(),
            md5: Md5::new(),
            pending: None,
        }
    }
}

impl Drop for Md5Server {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            lock(shared).closed = true;
            shared.wake.notify_all();
        }
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Queue> {
    // The queue is consistent at every unlock (a push, a pop, a flag), so a poisoned lock's
    // data is still good.
    shared.queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Closes the queue when the thread ends, even by a panic, so streams stop handing it work
/// (the jobs it drops answer their streams with an error, and they hash those chunks inline).
struct CloseOnExit<'a>(&'a Shared);

impl Drop for CloseOnExit<'_> {
    fn drop(&mut self) {
        let mut q = lock(self.0);
        q.closed = true;
        q.jobs.clear();
    }
}

struct Active {
    job: Job,
    /// Bytes of the job's data hashed so far.
    at: usize,
}

fn serve(shared: &Shared, kernel: Kernel) {
    let _close = CloseOnExit(shared);
    let lanes = kernel.lanes();
    let mut active: Vec<Active> = Vec::with_capacity(lanes);
    loop {
        {
            let mut q = lock(shared);
            while active.is_empty() && q.jobs.is_empty() {
                if q.closed {
                    return;
                }
                q = shared.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
            }
            while active.len() < lanes {
                match q.jobs.pop_front() {
                    Some(job) => active.push(Active { job, at: 0 }),
                    None => break,
                }
            }
        }
        // A stream whose caller went away (an upload cancelled) needs no more hashing.
        active.retain(|a| !a.job.done.is_closed());
        let Some(blocks) = active
            .iter()
            .map(|a| (a.job.data.len() - a.at) / BLOCK_LEN)
            .min()
        else {
            continue;
        };
        let blocks = blocks.min(ROUND_BLOCKS);
        let len = blocks * BLOCK_LEN;
        let mut states: Vec<[u32; 4]> = active.iter().map(|a| a.job.state).collect();
        let data: Vec<&[u8]> = active
            .iter()
            .map(|a| &a.job.data[a.at..a.at + len])
            .collect();
        compress_many(kernel, &mut states, &data);
        for (a, s) in active.iter_mut().zip(states) {
            a.job.state = s;
            a.at += len;
        }
        let mut i = 0;
        while i < active.len() {
            if active[i].at == active[i].job.data.len() {
                let a = active.swap_remove(i);
                // The stream may have gone meanwhile: nothing to tell it then.
                let _ = a.job.done.send(a.job.state);
            } else {
                i += 1;
            }
        }
    }
}

/// One stream hashed through an [`Md5Server`]. [`StreamHasher::update`] hands the data over and
/// returns at once; the next call (or [`StreamHasher::finalize`]) waits for it to be hashed, so
/// a caller that hashes block n and then processes it gets the hashing of block n done beside
/// its own work on block n.
pub struct StreamHasher {
    shared: Option<Arc<Shared>>,
    md5: Md5,
    pending: Option<Pending>,
}

impl std::fmt::Debug for StreamHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamHasher")
            .field("len", &self.md5.len)
            .field("pending", &self.pending.is_some())
            .finish()
    }
}

/// A chunk on the server: its data and the state before it are kept, so the chunk can be hashed
/// here if the server never answers.
struct Pending {
    done: oneshot::Receiver<[u32; 4]>,
    before: [u32; 4],
    data: Bytes,
}

impl StreamHasher {
    /// Hashes `data` after what came before: whole blocks of it on the server when they are
    /// worth it (the call returns before they are hashed), the rest here.
    pub async fn update(&mut self, mut data: Bytes) {
        self.settle().await;
        if self.md5.buf_len > 0 {
            let take = (BLOCK_LEN - self.md5.buf_len).min(data.len());
            self.md5.update(&data[..take]);
            data.advance(take);
        }
        let whole = data.len() - data.len() % BLOCK_LEN;
        if whole >= INLINE_MAX {
            if let Some(shared) = &self.shared {
                let chunk = data.split_to(whole);
                let (done, rx) = oneshot::channel();
                let before = self.md5.state;
                let taken = {
                    let mut q = lock(shared);
                    if q.closed {
                        false
                    } else {
                        q.jobs.push_back(Job {
                            state: before,
                            data: chunk.clone(),
                            done,
                        });
                        true
                    }
                };
                if taken {
                    shared.wake.notify_one();
                    self.md5.len = self.md5.len.wrapping_add(whole as u64);
                    self.pending = Some(Pending {
                        done: rx,
                        before,
                        data: chunk,
                    });
                } else {
                    self.md5.update(&chunk);
                }
            }
        }
        // What is left is hashed here (under a block when a chunk went to the server, so it
        // only fills the partial-block buffer and leaves the state to the server's answer).
        self.md5.update(&data);
    }

    /// Waits for the chunk on the server, if any.
    async fn settle(&mut self) {
        if let Some(p) = self.pending.take() {
            self.md5.state = match p.done.await {
                Ok(state) => state,
                Err(_) => {
                    let mut state = p.before;
                    scalar::compress(&mut state, &p.data);
                    state
                }
            };
        }
    }

    /// The digest of everything hashed.
    pub async fn finalize(mut self) -> [u8; 16] {
        self.settle().await;
        self.md5.finalize()
    }
}
