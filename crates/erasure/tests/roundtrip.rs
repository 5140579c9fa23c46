//! Whole-object round trips through the public API, the way the object layer uses it:
//! encode every block, frame every chunk with its bitrot hash into per-drive shard "files",
//! then read each block back from those files with chunks dropped or corrupted, rebuild, join.

use proptest::prelude::*;
use quarry_erasure::{bitrot, Erasure, ErasureError, DEFAULT_BLOCK_SIZE};

/// Small blocks keep the property tests fast while still spanning several blocks per object.
const BS: usize = 4096;
const LAYOUTS: [(usize, usize); 6] = [(1, 0), (2, 1), (2, 2), (4, 2), (8, 4), (12, 4)];

/// splitmix64: deterministic bytes and choices from one proptest-chosen seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `count` distinct indices in `0..n`.
    fn pick(&mut self, n: usize, count: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..count {
            let j = i + self.below(n - i);
            all.swap(i, j);
        }
        all.truncate(count);
        all
    }
}

fn object(size: usize, rng: &mut Rng) -> Vec<u8> {
    let mut data = Vec::with_capacity(size + 8);
    while data.len() < size {
        data.extend_from_slice(&rng.next().to_le_bytes());
    }
    data.truncate(size);
    data
}

/// What the writer puts on the k + m drives: per block, `[blake3 | chunk]` appended to each.
fn write_shard_files(er: &Erasure, data: &[u8]) -> Vec<Vec<u8>> {
    let mut files = vec![Vec::new(); er.total_shards()];
    let mut shards = Vec::new();
    for block in data.chunks(er.block_size()) {
        er.encode(block, &mut shards).unwrap();
        for (file, chunk) in files.iter_mut().zip(&shards) {
            bitrot::frame_into(chunk, file);
        }
    }
    for file in &files {
        assert_eq!(file.len() as u64, er.shard_file_size(data.len() as u64));
    }
    files
}

/// How one chunk of a block is damaged on its way back.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// The drive is gone or the read failed.
    Dropped,
    /// One byte flipped somewhere in the framed chunk (hash or data).
    Corrupt,
}

/// Reads block `block` from the shard files, damaging the chunks in `damage`. Corrupt chunks
/// must be caught by bitrot::verify and become missing slots.
fn read_block(
    er: &Erasure,
    files: &[Vec<u8>],
    size: u64,
    block: u64,
    damage: &[(usize, Damage)],
    rng: &mut Rng,
) -> Vec<Option<Vec<u8>>> {
    let start = er.shard_offset(block) as usize;
    let framed_len = er.framed_len(er.block_len(size, block));
    let mut slots = Vec::with_capacity(files.len());
    for (index, file) in files.iter().enumerate() {
        let mut framed = file[start..start + framed_len].to_vec();
        match damage.iter().find(|(i, _)| *i == index).map(|(_, d)| *d) {
            Some(Damage::Dropped) => {
                slots.push(None);
                continue;
            }
            Some(Damage::Corrupt) => {
                let at = rng.below(framed.len());
                framed[at] ^= 1 << rng.below(8);
            }
            None => {}
        }
        match bitrot::verify(&framed) {
            Ok(chunk) => {
                assert!(
                    damage.iter().all(|(i, _)| *i != index),
                    "corrupt chunk {index} of block {block} passed bitrot"
                );
                slots.push(Some(chunk.to_vec()));
            }
            Err(bitrot::BitrotError::Mismatch) => slots.push(None),
            Err(e) => panic!("unexpected bitrot error {e}"),
        }
    }
    slots
}

fn random_damage(n: usize, losses: usize, rng: &mut Rng) -> Vec<(usize, Damage)> {
    rng.pick(n, losses)
        .into_iter()
        .map(|i| {
            let d = if rng.next() & 1 == 0 {
                Damage::Dropped
            } else {
                Damage::Corrupt
            };
            (i, d)
        })
        .collect()
}

/// Writes the object, reads every block back with up to m chunks lost per block, rebuilds,
/// joins; checks the output byte for byte and that healing restores every original chunk.
fn round_trip(er: &Erasure, size: usize, seed: u64) {
    let mut rng = Rng(seed);
    let data = object(size, &mut rng);
    let files = write_shard_files(er, &data);
    let size = size as u64;
    let (k, m, n) = (er.data_shards(), er.parity_shards(), er.total_shards());

    let mut out = Vec::with_capacity(data.len());
    for block in 0..er.block_count(size) {
        let block_len = er.block_len(size, block);
        let losses = rng.below(m + 1);
        let damage = random_damage(n, losses, &mut rng);
        let mut slots = read_block(er, &files, size, block, &damage, &mut rng);
        assert_eq!(slots.iter().filter(|s| s.is_none()).count(), losses);

        er.reconstruct_data(&mut slots).unwrap();
        assert!(slots[..k].iter().all(Option::is_some));
        er.join(&slots, block_len, &mut out).unwrap();

        // Healing: every chunk, parity included, comes back exactly as written.
        er.reconstruct(&mut slots).unwrap();
        let intact = read_block(er, &files, size, block, &[], &mut rng);
        assert_eq!(slots, intact, "healed block {block}");
    }
    assert_eq!(out.len(), data.len());
    assert!(
        out == data,
        "object of {size} bytes differs after round trip"
    );
}

/// With m + 1 chunks of a block lost, rebuilding fails and the slots are left untouched.
fn too_many_losses(er: &Erasure, size: usize, seed: u64) {
    let mut rng = Rng(seed);
    let data = object(size, &mut rng);
    let files = write_shard_files(er, &data);
    let size = size as u64;
    let (k, m, n) = (er.data_shards(), er.parity_shards(), er.total_shards());

    let block = rng.next() % er.block_count(size);
    let damage = random_damage(n, m + 1, &mut rng);
    let slots = read_block(er, &files, size, block, &damage, &mut rng);

    let mut data_only = slots.clone();
    match er.reconstruct_data(&mut data_only) {
        Err(ErasureError::TooFewShards { have, need }) => {
            assert_eq!((have, need), (k - 1, k));
        }
        other => panic!("expected TooFewShards, got {other:?}"),
    }
    assert_eq!(data_only, slots, "slots changed on error");

    let mut all = slots.clone();
    assert!(matches!(
        er.reconstruct(&mut all),
        Err(ErasureError::TooFewShards { .. })
    ));
    assert_eq!(all, slots, "slots changed on error");

    // And join refuses rather than returning bytes with a hole in them, if a data chunk is lost.
    if slots[..k].iter().any(Option::is_none) {
        let mut out = Vec::new();
        assert!(matches!(
            er.join(&slots, er.block_len(size, block), &mut out),
            Err(ErasureError::TooFewShards { .. })
        ));
        assert!(out.is_empty());
    }
}

fn layout() -> impl Strategy<Value = (usize, usize)> {
    proptest::sample::select(&LAYOUTS[..])
}

fn object_size() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(BS - 1),
        Just(BS),
        Just(BS + 1),
        Just(3 * BS),
        Just(3 * BS + 17),
        0..6 * BS,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_m_losses_round_trip((k, m) in layout(), size in object_size(), seed in any::<u64>()) {
        let er = Erasure::new(k, m, BS).unwrap();
        round_trip(&er, size, seed);
    }

    #[test]
    fn m_plus_one_losses_fail((k, m) in layout(), size in 1..6 * BS, seed in any::<u64>()) {
        let er = Erasure::new(k, m, BS).unwrap();
        too_many_losses(&er, size, seed);
    }
}

#[test]
fn default_block_size_round_trips() {
    let mib = DEFAULT_BLOCK_SIZE;
    let cases = [
        ((8, 4), 0),
        ((8, 4), 1),
        ((8, 4), mib - 1),
        ((8, 4), mib),
        ((8, 4), mib + 1),
        ((12, 4), 2 * mib + mib / 2),
        ((2, 2), mib + 12345),
        ((1, 0), mib + 1),
    ];
    for (seed, ((k, m), size)) in cases.into_iter().enumerate() {
        let er = Erasure::new(k, m, mib).unwrap();
        round_trip(&er, size, seed as u64);
    }
}

#[test]
fn default_block_size_too_many_losses() {
    let er = Erasure::new(8, 4, DEFAULT_BLOCK_SIZE).unwrap();
    too_many_losses(&er, 2 * DEFAULT_BLOCK_SIZE + 3, 42);
}

/// Every pattern of exactly m losses (not just random ones) rebuilds, for a small layout.
#[test]
fn every_loss_pattern_of_4_plus_2() {
    let er = Erasure::new(4, 2, BS).unwrap();
    let mut rng = Rng(7);
    let data = object(BS, &mut rng);
    let mut shards = Vec::new();
    er.encode(&data, &mut shards).unwrap();
    for a in 0..6 {
        for b in a + 1..6 {
            let mut slots: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
            slots[a] = None;
            slots[b] = None;
            er.reconstruct(&mut slots).unwrap();
            let rebuilt: Vec<Vec<u8>> = slots.into_iter().flatten().collect();
            assert_eq!(rebuilt, shards, "lost {a} and {b}");
        }
    }
}
