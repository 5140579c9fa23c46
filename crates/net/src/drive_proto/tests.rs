//! Round trips and refusals of the drive protocol's messages.

use super::*;
use proptest::prelude::*;
use quarry_disk::{ErasureInfo, PartInfo, META_VERSION, UPLOAD_META_VERSION};

fn meta(inline: Option<Vec<u8>>) -> ObjectMeta {
    ObjectMeta {
        version: META_VERSION,
        version_id: None,
        delete_marker: false,
        size: 77,
        mod_time_ns: -5,
        etag: "e\"t".into(),
        headers: [("content-type".to_string(), "a/b".to_string())].into(),
        user_meta: [("ü".to_string(), "v\nw".to_string())].into(),
        checksums: Default::default(),
        erasure: ErasureInfo {
            codec: "rs-vandermonde-gf8".into(),
            bitrot: "blake3-256".into(),
            data: 2,
            parity: 2,
            block_size: 1 << 20,
            index: 2,
            distribution: vec![2, 1, 4, 3],
        },
        data_dir: inline.is_none().then(Uuid::new_v4),
        parts: vec![PartInfo {
            number: 1,
            size: 77,
            etag: "x".into(),
        }],
        inline: inline.map(Into::into),
    }
}

fn upload() -> UploadMeta {
    UploadMeta {
        version: UPLOAD_META_VERSION,
        bucket: "b".into(),
        key: "k/ü".into(),
        upload_id: Uuid::new_v4().to_string(),
        initiated_ns: 1,
        headers: Default::default(),
        user_meta: Default::default(),
        checksum_algorithm: Some("crc32".into()),
        erasure: meta(None).erasure,
    }
}

fn part(n: u32) -> PartMeta {
    PartMeta {
        version: UPLOAD_META_VERSION,
        number: n,
        size: 5 << 20,
        etag: "abc".into(),
        checksum: None,
        mod_time_ns: 9,
        data_dir: Uuid::new_v4(),
    }
}

fn all_requests() -> Vec<Request> {
    let (b, k, u) = ("bucket".to_string(), "a/b/ü".to_string(), Uuid::new_v4());
    let id = u.to_string();
    vec![
        Request::DiskInfo {},
        Request::MakeVolume { bucket: b.clone() },
        Request::ListVolumes {},
        Request::StatVolume { bucket: b.clone() },
        Request::DeleteVolume {
            bucket: b.clone(),
            force: true,
        },
        Request::ReadMeta {
            bucket: b.clone(),
            key: k.clone(),
        },
        Request::ReadVersion {
            bucket: b.clone(),
            key: k.clone(),
            version_id: Some(u),
        },
        Request::ReadVersion {
            bucket: b.clone(),
            key: k.clone(),
            version_id: None,
        },
        Request::ReadVersions {
            bucket: b.clone(),
            key: k.clone(),
            skip: 3,
            max_bytes: 4 << 20,
        },
        Request::DeleteVersion {
            bucket: b.clone(),
            key: k.clone(),
            version_id: Some(u),
        },
        Request::DeleteVersion {
            bucket: b.clone(),
            key: k.clone(),
            version_id: None,
        },
        Request::ListBucketConfigs { bucket: b.clone() },
        Request::ReadPartShard {
            bucket: b.clone(),
            key: k.clone(),
            upload_id: "0b8c3d9e-1f2a-4b3c-8d4e-5f6a7b8c9d0e".into(),
            data_dir: u,
            part: 3,
            offset: 4096,
            len: 70_000,
        },
        Request::WriteMeta {
            bucket: b.clone(),
            key: k.clone(),
            meta: meta(Some(vec![0, 10, 255])),
        },
        Request::ShardOpen {
            tmp_id: u,
            data_dir: Uuid::new_v4(),
            part: 3,
        },
        Request::ShardAppend {
            writer: u,
            seq: 7,
            data: Bytes::from(vec![1u8; 1000]),
        },
        Request::ShardFinish {
            writer: u,
            appends: 8,
        },
        Request::ShardAbort { writer: u },
        Request::ReadShard {
            bucket: b.clone(),
            key: k.clone(),
            data_dir: u,
            part: 1,
            offset: u64::MAX,
            len: 12,
        },
        Request::ReadShardData {
            bucket: b.clone(),
            key: k.clone(),
            data_dir: u,
            part: 7,
            offset: 1 << 40,
            len: 0,
        },
        Request::StatShard {
            bucket: b.clone(),
            key: k.clone(),
            data_dir: u,
            part: 2,
        },
        Request::RenameData {
            tmp_id: u,
            bucket: b.clone(),
            key: k.clone(),
            meta: meta(None),
        },
        Request::DeleteObject {
            bucket: b.clone(),
            key: k.clone(),
        },
        Request::DeleteTmp { tmp_id: u },
        Request::Walk {
            bucket: b.clone(),
            opts: WalkOptions {
                prefix: "p/".into(),
                marker: Some("p/q".into()),
                delimited: true,
                limit: 1001,
            },
            max_bytes: 4 << 20,
        },
        Request::Walk {
            bucket: b.clone(),
            opts: WalkOptions::default(),
            max_bytes: 0,
        },
        Request::ReadBucketConfig {
            bucket: b.clone(),
            name: "cors".into(),
        },
        Request::WriteBucketConfig {
            bucket: b.clone(),
            name: "cors".into(),
            data: Bytes::from_static(b"<xml/>"),
        },
        Request::DeleteBucketConfig {
            bucket: b.clone(),
            name: "cors".into(),
        },
        Request::CreateUpload { meta: upload() },
        Request::ReadUpload {
            bucket: b.clone(),
            key: k.clone(),
            upload_id: id.clone(),
        },
        Request::CommitPart {
            tmp_id: u,
            bucket: b.clone(),
            key: k.clone(),
            upload_id: id.clone(),
            part: part(4),
        },
        Request::ListParts {
            bucket: b.clone(),
            key: k.clone(),
            upload_id: id.clone(),
        },
        Request::StageParts {
            bucket: b.clone(),
            key: k.clone(),
            upload_id: id.clone(),
            parts: vec![part(1), part(2)],
            tmp_id: u,
            data_dir: Uuid::new_v4(),
        },
        Request::DeleteUpload {
            bucket: b.clone(),
            key: k.clone(),
            upload_id: id,
        },
        Request::ListUploads {
            bucket: None,
            after: vec![],
            max_bytes: 4 << 20,
        },
        Request::ReadFormat {},
        Request::WriteFormat {
            format: FormatV1::new(u, Uuid::new_v4(), vec![vec![u, Uuid::new_v4()]]),
        },
        Request::ListUploads {
            bucket: Some(b),
            after: vec!["b".into(), "k".into(), "u".into()],
            max_bytes: 0,
        },
    ]
}

fn all_responses() -> Vec<Response> {
    vec![
        Response::Unit,
        Response::DiskInfo(DiskInfo {
            endpoint: "/srv/d1".into(),
            id: Some(Uuid::new_v4()),
            total: 10,
            free: 3,
        }),
        Response::DiskInfo(DiskInfo {
            endpoint: String::new(),
            id: None,
            total: 0,
            free: 0,
        }),
        Response::Volumes(vec![
            VolInfo {
                name: "a".into(),
                created_ns: 1,
            },
            VolInfo {
                name: "b".into(),
                created_ns: -1,
            },
        ]),
        Response::Volume(VolInfo {
            name: "a".into(),
            created_ns: 1,
        }),
        Response::Meta(meta(Some((0..=255).collect()))),
        Response::Meta(meta(None)),
        Response::Versions(VersionsPage {
            metas: vec![meta(None), {
                let mut m = meta(None);
                m.version_id = Some(Uuid::new_v4());
                m.delete_marker = true;
                m.data_dir = None;
                m
            }],
            total: 5,
            digest: u64::MAX,
        }),
        Response::Versions(VersionsPage {
            metas: vec![],
            total: 0,
            digest: 0,
        }),
        Response::Names(vec!["cors".into(), "versioning".into()]),
        Response::Names(vec![]),
        Response::Writer(Uuid::new_v4()),
        Response::Format(None),
        Response::Format(Some(FormatV1::new(
            Uuid::new_v4(),
            Uuid::new_v4(),
            vec![vec![Uuid::new_v4()]],
        ))),
        Response::Data(Bytes::from(
            (0..=255u8).cycle().take(70_000).collect::<Vec<_>>(),
        )),
        Response::Data(Bytes::new()),
        Response::Len(u64::MAX),
        Response::Walk(WalkPage {
            entries: vec![
                WalkEntry::Prefix("a/".into()),
                WalkEntry::Object {
                    key: "b".into(),
                    meta: meta(None).into(),
                },
            ],
            more: true,
        }),
        Response::Upload(upload()),
        Response::Parts(vec![part(1), part(10_000)]),
        Response::Uploads(UploadsPage {
            uploads: vec![upload(), upload()],
            more: true,
        }),
    ]
}

#[test]
fn every_request_round_trips() {
    let reqs = all_requests();
    let methods: std::collections::HashSet<Method> = reqs.iter().map(|r| r.method()).collect();
    assert_eq!(methods.len(), Method::ALL.len(), "a method is not covered");
    for req in reqs {
        let (m, p) = encode_request(513, &req);
        assert_eq!(Method::from_u16(m), Some(req.method()));
        let (drive, back) = decode_request(m, p.clone()).unwrap();
        assert_eq!(drive, 513);
        assert_eq!(back, req);
        // Any strict prefix is an error, never a panic; so is any trailing byte.
        for cut in 0..p.len() {
            assert!(
                decode_request(m, p.slice(..cut)).is_err(),
                "{req:?} cut {cut}"
            );
        }
        let mut longer = BytesMut::from(&p[..]);
        longer.put_u8(0);
        assert_eq!(
            decode_request(m, longer.freeze()),
            Err(CodecError::Trailing(1))
        );
    }
}

#[test]
fn shard_append_prefix_and_data_are_the_append_request() {
    let (w, data) = (Uuid::new_v4(), Bytes::from_static(b"shard bytes"));
    let (m, full) = encode_request(
        9,
        &Request::ShardAppend {
            writer: w,
            seq: 77,
            data: data.clone(),
        },
    );
    let (pm, prefix) = encode_shard_append_prefix(9, w, 77, data.len() as u32);
    assert_eq!(pm, m);
    assert_eq!([&prefix[..], &data[..]].concat(), &full[..]);
}

#[test]
fn every_response_round_trips() {
    for resp in all_responses() {
        let p = encode_response(&resp);
        assert_eq!(decode_response(p.clone()).unwrap(), resp);
        for cut in 0..p.len() {
            assert!(
                decode_response(p.slice(..cut)).is_err(),
                "{resp:?} cut {cut}"
            );
        }
    }
}

/// Object metadata travels field by field: every map entry and the format version it was read
/// from come back as they were, its inline data is a slice of the message, and a format
/// version this build does not read is refused.
#[test]
fn object_metadata_travels_field_by_field() {
    let mut m = meta(Some((0..=255).collect()));
    m.version = quarry_disk::META_VERSION_MIN;
    m.headers
        .insert(quarry_disk::META_UPDATED_HEADER.into(), "17".into());
    m.checksums.insert("crc32c".into(), "AAAAAA==".into());
    m.checksums.insert("sha256".into(), String::new());
    let p = encode_response(&Response::Meta(m.clone()));
    let Response::Meta(back) = decode_response(p.clone()).unwrap() else {
        panic!()
    };
    assert_eq!(back, m);
    let inline = back.inline.unwrap();
    let at = p.len() - inline.len();
    assert_eq!(inline.as_ptr(), p[at..].as_ptr());
    // Not JSON any more: no brace, no field name.
    assert!(!p.windows(4).any(|w| w == b"etag"));

    for version in [0, META_VERSION + 1] {
        let mut m = meta(None);
        m.version = version;
        assert!(
            matches!(
                decode_response(encode_response(&Response::Meta(m))),
                Err(CodecError::OutOfRange { value, .. }) if value == u64::from(version)
            ),
            "version {version}"
        );
    }
}

#[test]
fn shard_data_travels_raw_and_decodes_without_copy() {
    let data = Bytes::from(vec![0xabu8; 4096]);
    let p = encode_response(&Response::Data(data.clone()));
    assert_eq!(p.len(), 2 + 4 + 4096);
    assert_eq!(&p[6..], &data[..]);
    let Response::Data(back) = decode_response(p.clone()).unwrap() else {
        panic!()
    };
    // The decoded bytes point into the payload.
    assert_eq!(back.as_ptr(), p[6..].as_ptr());
    let (m, p) = encode_request(
        0,
        &Request::ShardAppend {
            writer: Uuid::nil(),
            seq: 0,
            data: data.clone(),
        },
    );
    let (_, Request::ShardAppend { data: back, .. }) = decode_request(m, p.clone()).unwrap() else {
        panic!()
    };
    assert_eq!(back.as_ptr(), p[p.len() - 4096..].as_ptr());
}

#[test]
fn versions_methods_and_kinds_are_checked() {
    let (m, p) = encode_request(0, &Request::DiskInfo {});
    let mut bad = p.to_vec();
    // A request of the last version (1) is refused by name.
    bad[0] = 1;
    assert_eq!(
        decode_request(m, bad.into()),
        Err(CodecError::UnsupportedVersion {
            what: "drive protocol",
            got: 1,
            supported: DRIVE_PROTO_VERSION
        })
    );
    assert_eq!(
        decode_request(99, p.clone()),
        Err(CodecError::Unknown {
            what: "drive method",
            value: 99
        })
    );
    assert_eq!(
        decode_request(METHOD_BASE + 99, p),
        Err(CodecError::Unknown {
            what: "drive method",
            value: (METHOD_BASE + 99).into()
        })
    );
    assert_eq!(
        decode_response(Bytes::from_static(&[DRIVE_PROTO_VERSION, 200])),
        Err(CodecError::Unknown {
            what: "drive response kind",
            value: 200
        })
    );
    assert_eq!(
        decode_response(Bytes::from_static(&[9, 0])),
        Err(CodecError::UnsupportedVersion {
            what: "drive protocol",
            got: 9,
            supported: DRIVE_PROTO_VERSION
        })
    );
    // A count that promises more items than there are bytes is refused before allocating.
    assert!(matches!(
        decode_response(Bytes::from_static(&[
            DRIVE_PROTO_VERSION,
            8,
            0xff,
            0xff,
            0xff,
            0xff
        ])),
        Err(CodecError::Truncated { .. })
    ));
    // A bool is 0 or 1.
    let (m, p) = encode_request(
        0,
        &Request::DeleteVolume {
            bucket: "b".into(),
            force: true,
        },
    );
    let mut bad = p.to_vec();
    *bad.last_mut().unwrap() = 2;
    assert_eq!(
        decode_request(m, bad.into()),
        Err(CodecError::Unknown {
            what: "bool value",
            value: 2
        })
    );
}

fn all_errors() -> Vec<DriveError> {
    vec![
        DriveError::VolumeNotFound,
        DriveError::VolumeExists,
        DriveError::VolumeNotEmpty,
        DriveError::FileNotFound,
        DriveError::Truncated {
            offset: u64::MAX,
            wanted: usize::MAX,
            len: 0,
        },
        DriveError::CorruptMeta("bad json".into()),
        DriveError::UnsupportedVersion {
            found: 7,
            supported: 1,
        },
        DriveError::InvalidName("key \"..\"".into()),
        DriveError::Unusable("not mounted".into()),
        DriveError::DiskFull,
        DriveError::Io(std::io::Error::other("EIO")),
    ]
}

#[test]
fn every_drive_error_round_trips_through_an_error_frame() {
    for e in all_errors() {
        let (code, message) = encode_drive_error(&e);
        // Through the real error-frame encoding.
        let payload = crate::wire::encode_error(code, &message);
        let (code, message) = crate::wire::decode_error(&payload).unwrap();
        let back = decode_drive_error(code, &message).unwrap();
        assert_eq!(format!("{back:?}"), format!("{e:?}"));
        assert_eq!(back.to_string(), e.to_string());
    }
    assert!(decode_drive_error(crate::rpc::codes::INTERNAL, "x").is_none());
    assert!(decode_drive_error(codes::NO_SUCH_DRIVE, "x").is_none());
    for (code, msg) in [
        (codes::TRUNCATED, ""),
        (codes::TRUNCATED, "1 2"),
        (codes::TRUNCATED, "1 2 3 4"),
        (codes::TRUNCATED, "-1 2 3"),
        (codes::UNSUPPORTED_VERSION, "99999999999 1"),
        (codes::UNSUPPORTED_VERSION, "x y"),
    ] {
        assert!(
            matches!(decode_drive_error(code, msg), Some(DriveError::Io(_))),
            "{code} {msg:?}"
        );
    }
}

proptest! {
    #[test]
    fn garbage_requests_never_panic(method in 0u16..140, bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode_request(method, Bytes::from(bytes));
    }

    #[test]
    fn garbage_responses_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode_response(Bytes::from(bytes));
    }

    #[test]
    fn corrupted_requests_never_panic(which in 0usize..30, pos in any::<usize>(), byte in any::<u8>()) {
        let reqs = all_requests();
        let req = &reqs[which % reqs.len()];
        let (m, p) = encode_request(1, req);
        let mut b = p.to_vec();
        let i = pos % b.len();
        b[i] = byte;
        let _ = decode_request(m, Bytes::from(b));
    }

    #[test]
    fn corrupted_responses_never_panic(which in 0usize..20, pos in any::<usize>(), byte in any::<u8>()) {
        let resps = all_responses();
        let resp = &resps[which % resps.len()];
        let mut b = encode_response(resp).to_vec();
        let i = pos % b.len();
        b[i] = byte;
        let _ = decode_response(Bytes::from(b));
    }

    #[test]
    fn strings_and_walks_round_trip(
        bucket in "\\PC{0,40}",
        prefix in "\\PC{0,40}",
        marker in proptest::option::of("\\PC{0,40}"),
        delimited in any::<bool>(),
        limit in any::<u32>(),
        max_bytes in any::<u64>(),
        drive in any::<u16>(),
    ) {
        let req = Request::Walk { bucket, opts: WalkOptions { prefix, marker, delimited, limit: limit as usize }, max_bytes };
        let (m, p) = encode_request(drive, &req);
        prop_assert_eq!(decode_request(m, p).unwrap(), (drive, req));
    }

    #[test]
    fn drive_error_messages_round_trip(code in 0usize..11, msg in "\\PC{0,200}", a in any::<u64>(), b in any::<u32>()) {
        let e = match code {
            0 => DriveError::CorruptMeta(msg),
            1 => DriveError::InvalidName(msg),
            2 => DriveError::Unusable(msg),
            3 => DriveError::Io(std::io::Error::other(msg)),
            4 => DriveError::Truncated { offset: a, wanted: b as usize, len: a / 2 },
            5 => DriveError::UnsupportedVersion { found: b, supported: 1 },
            _ => DriveError::FileNotFound,
        };
        let (c, m) = encode_drive_error(&e);
        let back = decode_drive_error(c, &m).unwrap();
        prop_assert_eq!(format!("{back:?}"), format!("{e:?}"));
    }
}

/// A page of versions holds those after `skip` that fit (at least one), and its digest tells a
/// key changed between two pages apart.
#[test]
fn versions_pages_fit_and_their_digest_sees_a_change() {
    let v = |t: i64| {
        let mut m = meta(None);
        m.version_id = Some(Uuid::new_v4());
        m.mod_time_ns = t;
        m
    };
    let all: Vec<ObjectMeta> = (0..5).map(|t| v(100 - t)).collect();
    let one = encode_response(&Response::Meta(all[0].clone())).len() as u64;
    let p = VersionsPage::fit(all.clone(), 0, u64::MAX);
    assert_eq!((p.metas.len(), p.total), (5, 5));
    let p2 = VersionsPage::fit(all.clone(), 1, 2 * one);
    assert_eq!(p2.metas, all[1..3]);
    assert_eq!(p2.digest, p.digest);
    assert_eq!(
        VersionsPage::fit(all.clone(), 4, 0).metas,
        all[4..],
        "at least one"
    );
    assert!(VersionsPage::fit(all.clone(), 9, 0).metas.is_empty());
    let mut changed = all.clone();
    changed.insert(0, v(200));
    changed.pop();
    let c = VersionsPage::fit(changed, 0, u64::MAX);
    assert_eq!(c.total, p.total);
    assert_ne!(c.digest, p.digest, "same count, other versions");
}

/// A walk entry's estimate (what a drive's walk stops at, and what a drive server trusts to
/// send an answer without measuring it) is never under its encoding.
#[test]
fn a_walk_entrys_estimate_is_never_under_its_encoding() {
    let encoded = |e: &WalkEntry| {
        let mut b = BytesMut::new();
        e.encode(&mut b);
        b.len()
    };
    let mut big = meta(Some(vec![7; 5000]));
    big.version_id = Some(Uuid::new_v4());
    big.checksums
        .insert("crc64nvme".into(), "AAAAAAAAAAA=".into());
    big.parts = (1..=1000)
        .map(|n| PartInfo {
            number: n,
            size: 5 << 20,
            etag: format!("{n:032x}"),
        })
        .collect();
    let mut bare = meta(None);
    bare.version_id = Some(Uuid::new_v4());
    bare.etag.clear();
    bare.headers.clear();
    bare.user_meta.clear();
    bare.erasure.codec.clear();
    bare.erasure.bitrot.clear();
    bare.erasure.distribution.clear();
    bare.parts.clear();
    let entries = [
        WalkEntry::Prefix("a/".repeat(300)),
        WalkEntry::Prefix(String::new()),
        WalkEntry::Object {
            key: "k".into(),
            meta: meta(None).into(),
        },
        WalkEntry::Object {
            key: "ü".repeat(300),
            meta: big.into(),
        },
        WalkEntry::Object {
            key: String::new(),
            meta: bare.into(),
        },
    ];
    for e in &entries {
        assert!(
            e.wire_estimate() >= encoded(e),
            "{}: estimate {} < encoding {}",
            e.name(),
            e.wire_estimate(),
            encoded(e)
        );
    }
}
