//! The cost of a key's version count on one drive (crates/disk's version journal): a key with
//! 10,000 versions beside a key with one, for what GET/HEAD of the latest (`read_meta`), a listing
//! (`walk`), a ListObjectVersions page of that key (`read_versions`), a GET by version id
//! (`read_version` of the oldest) and a new version's commit (`rename_data` of a delete marker,
//! then `delete_version` of it) read and write.
//!
//! Versions are small inline objects (1 KiB of shard data each), as a backup tool's many small
//! files would be; the 10,000-version journal is ~12 MB.
//!
//! Run: `cargo bench -p quarry-benches --bench versions`. Read each "many" figure as a ratio to
//! the "one" beside it.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use quarry_disk::{
    Drive, ErasureInfo, LocalDrive, MetaJournal, ObjectMeta, PartInfo, WalkOptions, META_VERSION,
};
use uuid::Uuid;

const MANY: usize = 10_000;

fn version(i: usize) -> ObjectMeta {
    ObjectMeta {
        version: META_VERSION,
        version_id: Some(Uuid::new_v4()),
        delete_marker: false,
        size: 2048,
        mod_time_ns: 1_700_000_000_000_000_000 + i as i64,
        etag: format!("{:032x}", i),
        headers: [(
            "content-type".to_string(),
            "application/octet-stream".to_string(),
        )]
        .into(),
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
        parts: vec![PartInfo {
            number: 1,
            size: 2048,
            etag: format!("{:032x}", i),
        }],
        inline: Some(Bytes::from(vec![7u8; 1024 + 32])),
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let d = rt
        .block_on(LocalDrive::open_without_sweep(dir.path().join("d")))
        .unwrap();
    rt.block_on(d.make_volume("b")).unwrap();
    let mut oldest = Vec::new();
    for (key, n) in [("one", 1), ("many", MANY)] {
        let mut j = MetaJournal::new();
        for i in 0..n {
            j.insert(version(i));
        }
        oldest.push(j.versions().last().unwrap().version_id);
        let obj = d.root().join("b").join(key);
        std::fs::create_dir_all(&obj).unwrap();
        let bytes = j.to_bytes();
        eprintln!("{key}: {n} versions, quarry.meta {} bytes", bytes.len());
        std::fs::write(obj.join("quarry.meta"), bytes).unwrap();
    }

    let mut g = c.benchmark_group("versions");
    g.sample_size(20);
    for (i, key) in ["one", "many"].into_iter().enumerate() {
        g.bench_function(format!("read_meta latest/{key}"), |b| {
            b.iter(|| rt.block_on(d.read_meta("b", key)).unwrap())
        });
        let opts = WalkOptions {
            prefix: key.to_string(),
            limit: 1000,
            ..Default::default()
        };
        g.bench_function(format!("walk/{key}"), |b| {
            b.iter(|| rt.block_on(d.walk("b", &opts)).unwrap())
        });
        g.bench_function(format!("read_versions/{key}"), |b| {
            b.iter(|| rt.block_on(d.read_versions("b", key)).unwrap())
        });
        g.bench_function(format!("read_version oldest/{key}"), |b| {
            b.iter(|| rt.block_on(d.read_version("b", key, oldest[i])).unwrap())
        });
        g.bench_function(format!("commit and delete a marker/{key}"), |b| {
            b.iter(|| {
                let mut m = version(MANY + 1);
                m.delete_marker = true;
                m.inline = None;
                m.parts.clear();
                m.size = 0;
                rt.block_on(d.rename_data(Uuid::new_v4(), "b", key, &m))
                    .unwrap();
                rt.block_on(d.delete_version("b", key, m.version_id))
                    .unwrap();
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
