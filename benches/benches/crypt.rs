//! Package encryption throughput: one 1 MiB block sealed into 16 packages (AES-256-GCM, what a
//! PUT of an encrypted object does per block) and opened again (a GET), beside a memcpy of the
//! same block (the floor: sealing copies the plaintext into the stored buffer once).
//!
//! - `crypt/memcpy`: copy 1 MiB into a reused buffer.
//! - `crypt/seal`: `Encryptor::seal` of 1 MiB into a reused buffer.
//! - `crypt/open`: `Decryptor::push` of the sealed block into a reused buffer.
//!
//! Throughput is plaintext bytes per second. Run: `cargo bench -p quarry-benches --bench crypt`.

use std::hint::black_box;
use std::time::Duration;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quarry_crypt::{Decryptor, Encryptor, ObjectKey, PackageRange};

const LEN: usize = 1 << 20;

fn crypt(c: &mut Criterion) {
    let plain: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 3) as u8).collect();
    let key = match ObjectKey::random() {
        Ok(k) => k.part_key(1),
        Err(e) => panic!("key: {e}"),
    };
    let mut sealed = BytesMut::new();
    if let Err(e) = Encryptor::new(&key).seal(&plain, true, &mut sealed) {
        panic!("seal: {e}");
    }
    let mut group = c.benchmark_group("crypt");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Bytes(LEN as u64));
    let mut out = BytesMut::with_capacity(LEN + 4096);
    group.bench_function("memcpy", |b| {
        b.iter(|| {
            out.clear();
            out.extend_from_slice(black_box(&plain));
            black_box(&out);
        })
    });
    group.bench_function("seal", |b| {
        b.iter(|| {
            out.clear();
            let r = Encryptor::new(&key).seal(black_box(&plain), true, &mut out);
            assert!(r.is_ok());
            black_box(&out);
        })
    });
    let range = PackageRange::new(LEN as u64, 0, LEN as u64);
    group.bench_function("open", |b| {
        b.iter(|| {
            out.clear();
            let mut d = Decryptor::new(&key, LEN as u64, &range);
            let r = d.push(black_box(&sealed), &mut out);
            assert!(r.is_ok() && d.finish().is_ok());
            black_box(&out);
        })
    });
    group.finish();
}

criterion_group!(benches, crypt);
criterion_main!(benches);
