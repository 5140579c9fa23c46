//! Every way of hashing here agrees with the `md-5` crate: random lengths, random mixes of
//! streams, random cuts of each stream into chunks, every kernel this CPU has.

use bytes::Bytes;
use md5::Digest;
use proptest::prelude::*;
use quarry_md5x::{digest_many_with, Kernel, Md5, Md5Server};

fn reference(data: &[u8]) -> [u8; 16] {
    md5::Md5::digest(data).into()
}

fn kernels() -> Vec<Kernel> {
    [Kernel::Scalar, Kernel::Avx2, Kernel::Avx512]
        .into_iter()
        .filter(|k| k.is_supported())
        .collect()
}

/// Bytes of a stream from a seed (xorshift), so a case is cheap to describe and shrink.
fn bytes_of(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn digest_many_matches_md5(lens in prop::collection::vec(0usize..5000, 0..40), seed: u64) {
        let msgs: Vec<Vec<u8>> = lens.iter().enumerate().map(|(i, &l)| bytes_of(seed ^ i as u64, l)).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
        for kernel in kernels() {
            let got = digest_many_with(kernel, &refs);
            for (m, g) in msgs.iter().zip(got) {
                prop_assert_eq!(g, reference(m), "{:?} len {}", kernel, m.len());
            }
        }
    }

    #[test]
    fn incremental_md5_matches_md5(len in 0usize..3000, cuts in prop::collection::vec(0usize..300, 0..20), seed: u64) {
        let data = bytes_of(seed, len);
        let mut h = Md5::new();
        let mut at = 0;
        for c in cuts {
            let end = (at + c).min(data.len());
            h.update(&data[at..end]);
            at = end;
        }
        h.update(&data[at..]);
        prop_assert_eq!(h.finalize(), reference(&data));
    }
}

/// Streams of random lengths cut into random chunks (small ones hashed inline, large ones on
/// the server, partial blocks carried between them), all hashed at once on one server.
#[test]
fn concurrent_streams_through_the_server_match_md5() {
    let rt = runtime();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    });
    let strategy = (
        prop::collection::vec(
            (
                0usize..600_000,
                prop::collection::vec(1usize..200_000, 1..8),
            ),
            1..24,
        ),
        any::<u64>(),
    );
    let result = runner.run(&strategy, |(streams, seed)| {
        for kernel in kernels() {
            let server = Md5Server::new(kernel);
            let tasks: Vec<_> = streams
                .iter()
                .enumerate()
                .map(|(i, (len, cuts))| {
                    let data = Bytes::from(bytes_of(seed ^ (i as u64) << 32, *len));
                    let mut h = server.stream();
                    let cuts = cuts.clone();
                    rt.spawn(async move {
                        let mut at = 0;
                        let mut c = 0;
                        while at < data.len() {
                            let end = (at + cuts[c % cuts.len()]).min(data.len());
                            h.update(data.slice(at..end)).await;
                            at = end;
                            c += 1;
                        }
                        (h.finalize().await, reference(&data))
                    })
                })
                .collect();
            for t in tasks {
                let (got, want) = match rt.block_on(t) {
                    Ok(v) => v,
                    Err(e) => panic!("stream task: {e}"),
                };
                prop_assert_eq!(got, want, "{:?}", kernel);
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A stream whose chunk is on the server when the server is dropped still gets its digest.
#[test]
fn a_dropped_server_finishes_or_hands_back_its_work() {
    let rt = runtime();
    let data = Bytes::from(bytes_of(7, 3 << 20));
    let server = Md5Server::new(Kernel::detect());
    let mut h = server.stream();
    rt.block_on(h.update(data.slice(..1 << 20)));
    drop(server);
    rt.block_on(h.update(data.slice(1 << 20..)));
    assert_eq!(rt.block_on(h.finalize()), reference(&data));
}

/// A stream abandoned with a chunk on the server does not stop the server serving others.
#[test]
fn an_abandoned_stream_does_not_stall_others() {
    let rt = runtime();
    let server = Md5Server::new(Kernel::detect());
    let data = Bytes::from(bytes_of(9, 2 << 20));
    for _ in 0..4 {
        let mut gone = server.stream();
        rt.block_on(gone.update(data.clone()));
        drop(gone);
    }
    let mut h = server.stream();
    rt.block_on(h.update(data.clone()));
    assert_eq!(rt.block_on(h.finalize()), reference(&data));
}
