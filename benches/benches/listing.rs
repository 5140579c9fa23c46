//! A ListObjects page (1000 keys, after a marker in the middle) of one drive's walk of a large
//! prefix, with the drive's sorted listings kept between pages (crates/disk's list cache) beside
//! reading and sorting the directory for every page (the cache's budget at 0), in one run.
//!
//! Flat: N keys directly under one prefix (one directory of N entries). Nested: the same N keys
//! under 1000 sub-prefixes (`p0000/` … `p0999/`), the page taken inside one of them and, delimited,
//! over the sub-prefixes. Each key is a directory holding a hard link to one real `quarry.meta`
//! (so the tree costs N inodes and a few), on /dev/shm where it exists: page-cache warm. Sizes from
//! `QUARRY_BENCH_LIST_KEYS` (default `100000,1000000`); `QUARRY_BENCH_LIST_DIR` puts the tree
//! elsewhere: a disk, where `QUARRY_BENCH_LIST_COLD=1` drops the kernel's caches (page, dentry
//! and inode: `/proc/sys/vm/drop_caches`, as root) before every timed page. On tmpfs each hard
//! link takes an inode: a million keys flat and nested need about 4 M, more than /dev/shm has
//! here (3 M), so the million-key run goes on a disk.
//!
//! Run: `cargo bench -p quarry-benches --bench listing`. Read "kept" as a ratio to "read" beside it.

use std::path::Path;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use quarry_disk::{
    set_list_cache_budget, Drive, ErasureInfo, LocalDrive, ObjectMeta, WalkOptions,
    DEFAULT_LIST_CACHE_BUDGET, META_VERSION,
};
use uuid::Uuid;

fn meta() -> ObjectMeta {
    ObjectMeta {
        version: META_VERSION,
        version_id: None,
        delete_marker: false,
        size: 4096,
        mod_time_ns: 1_700_000_000_000_000_000,
        etag: format!("{:032x}", 7),
        headers: Default::default(),
        user_meta: Default::default(),
        checksums: Default::default(),
        erasure: ErasureInfo {
            codec: "rs-vandermonde-gf8".into(),
            bitrot: "blake3-256".into(),
            data: 2,
            parity: 2,
            block_size: 1 << 20,
            index: 1,
            distribution: vec![1, 2, 3, 4],
        },
        data_dir: None,
        parts: vec![],
        inline: Some(Bytes::from(vec![7u8; 2048 + 32])),
    }
}

/// Makes the key directories under `bucket`, each with a hard link to a copy of `meta_file`
/// (a new copy every 50,000 links: ext4 allows 65,000 links to a file).
fn fill(bucket: &Path, meta_file: &Path, keys: impl Iterator<Item = String>) {
    let mut copy = meta_file.to_path_buf();
    for (i, key) in keys.enumerate() {
        if i % 50_000 == 0 {
            copy = bucket.join(format!("seed-{}", uuid::Uuid::new_v4()));
            std::fs::copy(meta_file, &copy).unwrap();
        }
        let dir = bucket.join(&key);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::hard_link(&copy, dir.join("quarry.meta")).unwrap();
    }
}

fn bench(c: &mut Criterion) {
    let sizes: Vec<usize> = std::env::var("QUARRY_BENCH_LIST_KEYS")
        .unwrap_or_else(|_| "100000,1000000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("QUARRY_BENCH_LIST_KEYS: numbers"))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let base = std::env::var_os("QUARRY_BENCH_LIST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            if Path::new("/dev/shm").is_dir() {
                "/dev/shm".into()
            } else {
                std::env::temp_dir()
            }
        });
    let cold = std::env::var_os("QUARRY_BENCH_LIST_COLD").is_some_and(|v| v == "1");
    let mut g = c.benchmark_group("listing page");
    g.sample_size(10);
    for n in sizes {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let d = rt
            .block_on(LocalDrive::open_without_sweep(dir.path().join("d")))
            .unwrap();
        rt.block_on(d.make_volume("b")).unwrap();
        rt.block_on(d.rename_data(Uuid::new_v4(), "b", "seed", &meta()))
            .unwrap();
        let seed = d.root().join("b/seed/quarry.meta");
        let bucket = d.root().join("b");
        let t = std::time::Instant::now();
        fill(&bucket, &seed, (0..n).map(|i| format!("flat/k{i:08}")));
        let per = n / 1000;
        fill(
            &bucket,
            &seed,
            (0..n).map(|i| format!("nest/p{:04}/k{:08}", i / per, i)),
        );
        eprintln!("{n} keys flat and nested: made in {:.1?}", t.elapsed());
        // Let the directories settle, as a prefix not written in the last seconds is.
        std::thread::sleep(std::time::Duration::from_millis(2100));

        let cases = [
            (
                "flat",
                WalkOptions {
                    prefix: "flat/".into(),
                    marker: Some(format!("flat/k{:08}", n / 2)),
                    delimited: false,
                    limit: 1000,
                },
            ),
            (
                "nested, inside a sub-prefix",
                WalkOptions {
                    prefix: format!("nest/p{:04}/", 500),
                    marker: Some(format!("nest/p{:04}/k{:08}", 500, 500 * per + per / 2)),
                    delimited: false,
                    limit: 1000,
                },
            ),
            (
                "nested, delimited over the sub-prefixes",
                WalkOptions {
                    prefix: "nest/".into(),
                    marker: Some("nest/p0499/".into()),
                    delimited: true,
                    limit: 1000,
                },
            ),
        ];
        for (name, opts) in &cases {
            let want = opts.limit.min(if name.starts_with("nested, inside") {
                per / 2 - 1
            } else if name.starts_with("nested, delimited") {
                500
            } else {
                n / 2 - 1
            });
            for (label, budget) in [("read", 0), ("kept", DEFAULT_LIST_CACHE_BUDGET)] {
                set_list_cache_budget(budget);
                let page = || {
                    let page = rt.block_on(d.walk("b", opts)).unwrap();
                    assert_eq!(page.len(), want, "{name}");
                    page
                };
                if cold {
                    page(); // keeps the listing (the kernel's caches are dropped, not ours)
                    g.bench_function(format!("{n} keys, {name}/{label}, cold"), |b| {
                        b.iter_custom(|iters| {
                            let mut t = std::time::Duration::ZERO;
                            for _ in 0..iters {
                                std::fs::write("/proc/sys/vm/drop_caches", "3")
                                    .expect("dropping the caches needs root");
                                let t0 = std::time::Instant::now();
                                std::hint::black_box(page());
                                t += t0.elapsed();
                            }
                            t
                        })
                    });
                } else {
                    g.bench_function(format!("{n} keys, {name}/{label}"), |b| b.iter(page));
                }
            }
        }
        set_list_cache_budget(DEFAULT_LIST_CACHE_BUDGET);
        let f = quarry_disk::list_cache_figures();
        eprintln!(
            "{n} keys: {} listings kept, {} bytes; {} hits, {} misses",
            f.listings, f.bytes, f.hits, f.misses
        );
        set_list_cache_budget(0);
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
