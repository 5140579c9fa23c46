//! Property tests of the package format: every plaintext range of every size round-trips
//! through any cutting of the stored bytes, and every tampering is refused, never answered
//! with wrong plaintext.

use bytes::BytesMut;
use proptest::prelude::*;
use quarry_crypt::{
    decrypted_size, encrypted_size, CryptError, Decryptor, Encryptor, ObjectKey, PackageRange,
    PartKey, PACKAGE_SIZE, SEALED_PACKAGE_SIZE,
};

/// Seals `plain` in blocks of `block_packages` packages, as the object layer does.
fn seal(key: &PartKey, plain: &[u8], block_packages: usize) -> Vec<u8> {
    let mut e = Encryptor::new(key);
    let mut out = BytesMut::new();
    let block = block_packages * PACKAGE_SIZE;
    let mut blocks: Vec<&[u8]> = plain.chunks(block).collect();
    if blocks.is_empty() {
        blocks.push(&[]);
    }
    let n = blocks.len();
    for (i, b) in blocks.into_iter().enumerate() {
        e.seal(b, i + 1 == n, &mut out).unwrap();
    }
    out.to_vec()
}

/// Opens `range` of the stored bytes `stored` (of a part of `plain_size`), fed in `cut` pieces.
fn open(
    key: &PartKey,
    plain_size: u64,
    stored: &[u8],
    offset: u64,
    len: u64,
    cut: usize,
) -> Result<Vec<u8>, CryptError> {
    let r = PackageRange::new(plain_size, offset, len);
    let mut d = Decryptor::new(key, plain_size, &r);
    let start = r.enc_offset as usize;
    let end = (start + r.enc_len as usize).min(stored.len());
    let mut out = BytesMut::new();
    for piece in stored[start.min(end)..end].chunks(cut.max(1)) {
        d.push(piece, &mut out)?;
    }
    d.finish()?;
    Ok(out.to_vec())
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_range_round_trips(
        size in prop_oneof![0usize..300, 65_000usize..66_000, 0usize..400_000],
        a in any::<u64>(), b in any::<u64>(),
        cut in prop_oneof![1usize..100, 1000usize..70_000, Just(1usize << 20)],
        block_packages in 1usize..20,
        seed in any::<u8>(),
    ) {
        let key = ObjectKey::random().unwrap().part_key(1);
        let plain = data(size, seed);
        let stored = seal(&key, &plain, block_packages);
        prop_assert_eq!(stored.len() as u64, encrypted_size(size as u64));
        prop_assert_eq!(decrypted_size(stored.len() as u64).unwrap(), size as u64);
        let (offset, len) = if size == 0 {
            (0, 0)
        } else {
            let o = a % size as u64;
            (o, 1 + b % (size as u64 - o))
        };
        let got = open(&key, size as u64, &stored, offset, len, cut).unwrap();
        prop_assert_eq!(&got[..], &plain[offset as usize..(offset + len) as usize]);
    }

    #[test]
    fn a_flipped_byte_is_refused(
        size in 1usize..300_000, at in any::<u64>(), bit in 0u8..8, seed in any::<u8>(),
    ) {
        let key = ObjectKey::random().unwrap().part_key(1);
        let plain = data(size, seed);
        let mut stored = seal(&key, &plain, 4);
        let at = (at % stored.len() as u64) as usize;
        stored[at] ^= 1 << bit;
        // Reading the whole part must fail; any range whose packages include the flip too.
        prop_assert!(open(&key, size as u64, &stored, 0, size as u64, 4096).is_err());
        let pkg = at / SEALED_PACKAGE_SIZE;
        let o = (pkg * PACKAGE_SIZE) as u64;
        prop_assert!(open(&key, size as u64, &stored, o, 1, 4096).is_err());
    }
}

fn packages_of(stored: &[u8]) -> Vec<Vec<u8>> {
    stored
        .chunks(SEALED_PACKAGE_SIZE)
        .map(|c| c.to_vec())
        .collect()
}

#[test]
fn reordered_dropped_truncated_or_moved_packages_are_refused() {
    let ok = ObjectKey::random().unwrap();
    let key = ok.part_key(1);
    let size = 5 * PACKAGE_SIZE + 100;
    let plain = data(size, 1);
    let stored = seal(&key, &plain, 2);
    let pk = packages_of(&stored);
    let all = size as u64;
    assert_eq!(open(&key, all, &stored, 0, all, 9999).unwrap(), plain);

    // Two packages swapped.
    let mut swapped = pk.clone();
    swapped.swap(1, 2);
    assert!(open(&key, all, &swapped.concat(), 0, all, 9999).is_err());

    // A package dropped: shorter than the size says, and the sequence numbers shift.
    let mut dropped = pk.clone();
    dropped.remove(2);
    assert!(open(&key, all, &dropped.concat(), 0, all, 9999).is_err());
    // ... even when the reader believes the shorter size.
    let short = all - PACKAGE_SIZE as u64;
    assert!(open(&key, short, &dropped.concat(), 0, short, 9999).is_err());

    // Truncated after whole packages, read as if the part were that long: the last package
    // was not sealed as final.
    let cut: Vec<u8> = pk[..3].concat();
    let three = 3 * PACKAGE_SIZE as u64;
    assert!(open(&key, three, &cut, 0, three, 9999).is_err());
    // Truncated mid-package: fails at the end.
    assert!(open(&key, all, &stored[..stored.len() - 5], 0, all, 9999).is_err());

    // The same packages under another part's key, or another object's.
    assert!(open(&ok.part_key(2), all, &stored, 0, all, 9999).is_err());
    let other = ObjectKey::random().unwrap().part_key(1);
    assert!(open(&other, all, &stored, 0, all, 9999).is_err());

    // A package of another object at the same position.
    let stored2 = seal(&other, &data(size, 2), 2);
    let mut mixed = pk.clone();
    mixed[3] = packages_of(&stored2)[3].clone();
    assert!(open(&key, all, &mixed.concat(), 0, all, 9999).is_err());

    // Too many bytes.
    let mut longer = stored.clone();
    longer.extend_from_slice(&[0; 16]);
    let r = PackageRange::new(all, 0, all);
    let mut d = Decryptor::new(&key, all, &r);
    assert_eq!(
        d.push(&longer, &mut BytesMut::new()),
        Err(CryptError::TooLong)
    );
}

#[test]
fn an_empty_part_is_authenticated() {
    let key = ObjectKey::random().unwrap().part_key(1);
    let stored = seal(&key, &[], 1);
    assert_eq!(stored.len(), 16);
    assert_eq!(open(&key, 0, &stored, 0, 0, 1).unwrap(), b"");
    let mut bad = stored.clone();
    bad[0] ^= 1;
    assert!(open(&key, 0, &bad, 0, 0, 1).is_err());
    assert!(open(&key, 0, &[], 0, 0, 1).is_err(), "missing package");
}
