//! MD5 throughput: N streams of 1 MiB each, hashed by the md-5 crate one after another, vs
//! quarry-md5x's kernels together (`digest_many`), vs N concurrent streams through the
//! md5x server in 1 MiB updates, as the PUT path feeds it.
//!
//! - `md5/md-5/N`: md-5 0.10, N messages one after another (what the PUT path did per upload).
//! - `md5/scalar|avx2|avx512/N`: `digest_many_with(kernel)` over the N messages.
//! - `md5/server/N`: N tasks on a 2-worker tokio runtime, each a `StreamHasher` fed its message
//!   in one update, then finalized; includes the hand-over to the hashing thread and back.
//!
//! Throughput is bytes of all N messages per second. Run: `cargo bench -p quarry-benches --bench md5`.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use md5::Digest;
use quarry_md5x::{digest_many_with, Kernel, Md5Server};

const LEN: usize = 1 << 20;

fn message(seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..LEN)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn md5(c: &mut Criterion) {
    let msgs: Vec<Vec<u8>> = (0..16).map(message).collect();
    let shared: Vec<Bytes> = msgs.iter().map(|m| Bytes::from(m.clone())).collect();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let server = Md5Server::global();
    let mut group = c.benchmark_group("md5");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for n in [1usize, 4, 8, 16] {
        group.throughput(Throughput::Bytes((n * LEN) as u64));
        let refs: Vec<&[u8]> = msgs[..n].iter().map(|m| &m[..]).collect();
        group.bench_with_input(BenchmarkId::new("md-5", n), &refs, |b, refs| {
            b.iter(|| {
                for m in refs {
                    black_box(md5::Md5::digest(black_box(m)));
                }
            })
        });
        for kernel in [Kernel::Scalar, Kernel::Avx2, Kernel::Avx512] {
            if !kernel.is_supported() {
                continue;
            }
            let name = format!("{kernel:?}").to_lowercase();
            group.bench_with_input(BenchmarkId::new(name, n), &refs, |b, refs| {
                b.iter(|| black_box(digest_many_with(kernel, black_box(refs))))
            });
        }
        group.bench_with_input(BenchmarkId::new("server", n), &n, |b, &n| {
            b.iter(|| {
                rt.block_on(async {
                    let tasks: Vec<_> = shared[..n]
                        .iter()
                        .map(|m| {
                            let m = m.clone();
                            let mut h = server.stream();
                            tokio::spawn(async move {
                                h.update(m).await;
                                h.finalize().await
                            })
                        })
                        .collect();
                    for t in tasks {
                        black_box(t.await.ok());
                    }
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, md5);
criterion_main!(benches);
