//! What object metadata costs on the internode wire: a GET's metadata read (one object as an SDK
//! writes it: a content type, a checksum, one part) and a listing's walk answer (250 keys'
//! listing views, a cluster page's share of one drive), each encoded and decoded in the
//! codec's layout (what the drive protocol sends since version 3) beside the metadata's JSON file
//! format (what it sent before: `ObjectMeta::to_bytes` as a byte string, decoded with
//! `ObjectMeta::from_shared`), in one run.
//!
//! Run: `cargo bench -p quarry-benches --bench metacodec`. Read "codec" as a ratio to "json".

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion};
use quarry_disk::{ErasureInfo, ObjectMeta, PartInfo, WalkEntry, META_VERSION};
use quarry_net::codec::{BufExt, BufMutExt};
use quarry_net::drive_proto::{decode_response, encode_response, Response, WalkPage};
use uuid::Uuid;

fn object(i: usize) -> ObjectMeta {
    ObjectMeta {
        version: META_VERSION,
        version_id: None,
        delete_marker: false,
        size: 1 << 20,
        mod_time_ns: 1_700_000_000_000_000_000 + i as i64,
        etag: format!("{i:032x}"),
        headers: [(
            "content-type".to_string(),
            "application/octet-stream".to_string(),
        )]
        .into(),
        user_meta: Default::default(),
        checksums: [("crc32".to_string(), "8c1cEQ==".to_string())].into(),
        erasure: ErasureInfo {
            codec: "rs-vandermonde-gf8".into(),
            bitrot: "blake3-256".into(),
            data: 2,
            parity: 2,
            block_size: 1 << 20,
            index: 1,
            distribution: vec![1, 2, 3, 4],
        },
        data_dir: Some(Uuid::new_v4()),
        parts: vec![PartInfo {
            number: 1,
            size: 1 << 20,
            etag: format!("{i:032x}"),
        }],
        inline: None,
    }
}

/// The JSON way: each entry its key (if any) and its metadata's file format, a byte string in
/// the message.
fn json_encode(entries: &[(Option<String>, ObjectMeta)]) -> Bytes {
    let mut b = BytesMut::new();
    for (k, m) in entries {
        if let Some(k) = k {
            b.put_value(k);
        }
        b.put_value(&Bytes::from(m.to_bytes()));
    }
    b.freeze()
}

fn json_decode(mut b: Bytes, entries: &[(Option<String>, ObjectMeta)]) -> Vec<ObjectMeta> {
    entries
        .iter()
        .map(|(k, _)| {
            if k.is_some() {
                b.get_value::<String>().unwrap();
            }
            ObjectMeta::from_shared(b.get_value::<Bytes>().unwrap()).unwrap()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("metacodec");
    let one = object(1);
    let one_json = [(None, one.clone())];
    g.bench_function("read_meta/json", |b| {
        b.iter(|| json_decode(json_encode(&one_json), &one_json))
    });
    g.bench_function("read_meta/codec", |b| {
        b.iter(|| decode_response(encode_response(&Response::Meta(one.clone()))).unwrap())
    });
    let views: Vec<(Option<String>, ObjectMeta)> = (0..250)
        .map(|i| (Some(format!("flat/k{i:08}")), object(i).listing_view()))
        .collect();
    let walk = Response::Walk(WalkPage {
        entries: views
            .iter()
            .map(|(k, m)| WalkEntry::Object {
                key: k.clone().unwrap(),
                meta: m.clone().into(),
            })
            .collect(),
        more: false,
    });
    g.bench_function("walk_250/json", |b| {
        b.iter(|| json_decode(json_encode(&views), &views))
    });
    g.bench_function("walk_250/codec", |b| {
        b.iter(|| decode_response(encode_response(&walk)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
