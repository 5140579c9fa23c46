//! Erasure coding and bitrot throughput on 1 MiB blocks, beside a memcpy of the same bytes.
//!
//! - `erasure/encode/k+m`: one 1 MiB block into k data + m parity chunks (data copied into the
//!   chunks, parity computed).
//! - `erasure/decode/k+m`: `reconstruct_data` with m data chunks lost (the worst degraded read),
//!   including allocating the rebuilt chunks, as the object layer does.
//! - `erasure/put-block-owned/k+m` vs `erasure/put-block-framed/k+m`: a PUT block as the object
//!   layer used to prepare it (encode into owned chunks, then frame each into a new buffer for its
//!   drive) and as it does now (`encode_framed` straight into reused framed slots, as pooled
//!   buffers are reused).
//! - `erasure/degraded-owned/k+m` vs `erasure/degraded-in-place/k+m`: a degraded GET block with m
//!   data chunks lost, as it used to be done (copy the k chunks read into owned buffers,
//!   `reconstruct_data`, join into a new block) and as it is now (`reconstruct_into` from the
//!   chunks where they landed into one buffer for the lost chunks).
//! - `erasure/encode|decode|degraded-in-place/k+m/KERNEL`: with each Galois-field kernel this
//!   CPU runs (`Table`: reed-solomon-erasure's, the fallback; `GfniAvx2`; `GfniAvx512`).
//! - `erasure/memcpy`: copying the 1 MiB block once, the floor any of the above is compared to.
//! - `erasure/bitrot-blake3`: framing a 1 MiB chunk as `[blake3 | chunk]` (hash plus copy).
//! - `erasure/blake3-hash`: the hash alone.
//!
//! Throughput is bytes of the block per second in every case. Run: `cargo bench -p quarry-benches`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use quarry_erasure::{bitrot, Erasure, GfKernel, DEFAULT_BLOCK_SIZE};

const LAYOUTS: [(usize, usize); 4] = [(2, 2), (4, 2), (8, 4), (12, 4)];

fn block() -> Vec<u8> {
    // Arbitrary non-constant bytes (xorshift), so nothing is special-cased on zeros.
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..DEFAULT_BLOCK_SIZE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn erasure(c: &mut Criterion) {
    let block = block();
    let mut group = c.benchmark_group("erasure");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Bytes(block.len() as u64));

    group.bench_function("memcpy", |b| {
        let mut dst = vec![0u8; block.len()];
        b.iter(|| {
            dst.copy_from_slice(black_box(&block));
            black_box(&mut dst);
        })
    });

    let kernels: Vec<GfKernel> = [GfKernel::Table, GfKernel::GfniAvx2, GfKernel::GfniAvx512]
        .into_iter()
        .filter(|k| k.is_supported())
        .collect();
    for (k, m, kernel) in LAYOUTS
        .iter()
        .flat_map(|&(k, m)| kernels.iter().map(move |&kernel| (k, m, kernel)))
    {
        let er = match Erasure::with_kernel(k, m, DEFAULT_BLOCK_SIZE, kernel) {
            Ok(er) => er,
            Err(e) => panic!("{k}+{m}: {e}"),
        };
        let id = format!("{k}+{m}/{kernel:?}");

        group.bench_with_input(BenchmarkId::new("encode", &id), &er, |b, er| {
            let mut shards = Vec::new();
            b.iter(|| {
                if let Err(e) = er.encode(black_box(&block), &mut shards) {
                    panic!("encode: {e}");
                }
                black_box(&shards);
            })
        });

        group.bench_with_input(BenchmarkId::new("decode", &id), &er, |b, er| {
            let mut shards = Vec::new();
            if let Err(e) = er.encode(&block, &mut shards) {
                panic!("encode: {e}");
            }
            let mut slots: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
            b.iter(|| {
                // Lose the first m data chunks: every lost chunk needs the full decode matrix.
                for slot in &mut slots[..m] {
                    *slot = None;
                }
                if let Err(e) = er.reconstruct_data(black_box(&mut slots)) {
                    panic!("reconstruct_data: {e}");
                }
                black_box(&slots);
            });
            // The benchmark is only worth its figure if the decode was right.
            for (i, (slot, shard)) in slots.iter().zip(&shards).enumerate() {
                assert_eq!(
                    slot.as_ref(),
                    Some(shard),
                    "{k}+{m}: shard {i} rebuilt wrong"
                );
            }
        });

        let mut shards = Vec::new();
        if let Err(e) = er.encode(&block, &mut shards) {
            panic!("encode: {e}");
        }
        let chunk_len = shards[0].len();
        // The chunks a degraded read has: every data chunk but the first m, then m parity.
        let read: Vec<usize> = (m..k + m).collect();
        group.bench_with_input(BenchmarkId::new("degraded-in-place", &id), &er, |b, er| {
            let present: Vec<Option<&[u8]>> = (0..k + m)
                .map(|i| read.contains(&i).then(|| &shards[i][..]))
                .collect();
            let mut lost = vec![0u8; m * chunk_len];
            b.iter(|| {
                let mut out: Vec<(usize, &mut [u8])> =
                    lost.chunks_mut(chunk_len).enumerate().collect();
                if let Err(e) = er.reconstruct_into(black_box(&present), &mut out) {
                    panic!("reconstruct_into: {e}");
                }
                black_box(&out);
            });
            for (i, c) in lost.chunks(chunk_len).enumerate() {
                assert_eq!(c, &shards[i][..], "{k}+{m}: chunk {i} rebuilt wrong");
            }
        });
    }

    for (k, m) in LAYOUTS {
        let er = match Erasure::new(k, m, DEFAULT_BLOCK_SIZE) {
            Ok(er) => er,
            Err(e) => panic!("{k}+{m}: {e}"),
        };
        let id = format!("{k}+{m}");
        let framed_len = er.framed_len(block.len());

        group.bench_with_input(BenchmarkId::new("put-block-owned", &id), &er, |b, er| {
            let mut shards = Vec::new();
            b.iter(|| {
                if let Err(e) = er.encode(black_box(&block), &mut shards) {
                    panic!("encode: {e}");
                }
                let framed: Vec<Vec<u8>> = shards
                    .iter()
                    .map(|s| {
                        let mut f = Vec::with_capacity(framed_len);
                        bitrot::frame_into(s, &mut f);
                        f
                    })
                    .collect();
                black_box(framed);
            })
        });

        group.bench_with_input(BenchmarkId::new("put-block-framed", &id), &er, |b, er| {
            let mut bufs = vec![vec![0u8; framed_len]; k + m];
            b.iter(|| {
                let mut slots: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
                if let Err(e) = er.encode_framed(black_box(&block), &mut slots) {
                    panic!("encode_framed: {e}");
                }
                black_box(&slots);
            })
        });

        let mut shards = Vec::new();
        if let Err(e) = er.encode(&block, &mut shards) {
            panic!("encode: {e}");
        }
        // The chunks a degraded read has: every data chunk but the first m, then m parity.
        let read: Vec<usize> = (m..k + m).collect();

        group.bench_with_input(BenchmarkId::new("degraded-owned", &id), &er, |b, er| {
            b.iter(|| {
                let mut owned: Vec<Option<Vec<u8>>> = (0..k + m)
                    .map(|i| read.contains(&i).then(|| shards[i].to_vec()))
                    .collect();
                if let Err(e) = er.reconstruct_data(&mut owned) {
                    panic!("reconstruct_data: {e}");
                }
                let mut out = Vec::with_capacity(block.len());
                if let Err(e) = er.join(&owned, block.len(), &mut out) {
                    panic!("join: {e}");
                }
                black_box(out);
            })
        });
    }

    group.bench_function("bitrot-blake3", |b| {
        let mut out = Vec::with_capacity(bitrot::HASH_LEN + block.len());
        b.iter(|| {
            out.clear();
            bitrot::frame_into(black_box(&block), &mut out);
            black_box(&out);
        })
    });

    group.bench_function("blake3-hash", |b| {
        b.iter(|| black_box(bitrot::hash(black_box(&block))))
    });

    group.finish();
}

criterion_group!(benches, erasure);
criterion_main!(benches);
