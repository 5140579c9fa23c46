//! Erasure coding and bitrot throughput on 1 MiB blocks, beside a memcpy of the same bytes.
//!
//! - `erasure/encode/k+m`: one 1 MiB block into k data + m parity chunks (data copied into the
//!   chunks, parity computed).
//! - `erasure/decode/k+m`: `reconstruct_data` with m data chunks lost (the worst degraded read),
//!   including allocating the rebuilt chunks, as the object layer does.
//! - `erasure/memcpy`: copying the 1 MiB block once, the floor any of the above is compared to.
//! - `erasure/bitrot-blake3`: framing a 1 MiB chunk as `[blake3 | chunk]` (hash plus copy).
//! - `erasure/blake3-hash`: the hash alone.
//!
//! Throughput is bytes of the block per second in every case. Run: `cargo bench -p quarry-benches`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use quarry_erasure::{bitrot, Erasure, DEFAULT_BLOCK_SIZE};

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

    for (k, m) in LAYOUTS {
        let er = match Erasure::new(k, m, DEFAULT_BLOCK_SIZE) {
            Ok(er) => er,
            Err(e) => panic!("{k}+{m}: {e}"),
        };
        let id = format!("{k}+{m}");

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
