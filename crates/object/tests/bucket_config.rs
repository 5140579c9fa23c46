//! Bucket configuration documents over real drives: quorum writes, quorum reads, damage.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use quarry_object::*;

struct Fixture {
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    layer: Arc<ErasureServer>,
}

async fn fixture(drives: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (1..=drives)
        .map(|i| dir.path().join(format!("d{i}")))
        .collect();
    let cfg = ObjectConfig {
        parity: None,
        block_size: 64 * 1024,
        inline_limit: 4 * 1024,
        ..Default::default()
    };
    let layer = ErasureServer::open_local(paths.clone(), cfg).await.unwrap();
    layer.make_bucket("bkt").await.unwrap();
    Fixture {
        _dir: dir,
        paths,
        layer,
    }
}

fn blob(f: &Fixture, i: usize) -> PathBuf {
    f.paths[i].join(".quarry.sys/buckets/bkt/cors")
}

#[tokio::test]
async fn round_trip_replace_delete() {
    let f = fixture(4).await;
    let l = &f.layer;
    assert_eq!(l.get_bucket_config("bkt", "cors").await.unwrap(), None);
    l.put_bucket_config("bkt", "cors", Bytes::from_static(b"<a/>"))
        .await
        .unwrap();
    assert_eq!(
        l.get_bucket_config("bkt", "cors").await.unwrap().unwrap(),
        &b"<a/>"[..]
    );
    // Every drive holds a versioned envelope around the payload.
    for i in 0..4 {
        let raw = Bytes::from(std::fs::read(blob(&f, i)).unwrap());
        let env = ConfigEnvelope::decode(&raw).unwrap();
        assert_eq!(&env.payload[..], b"<a/>");
        assert_eq!(&raw[..4], b"QBCF");
    }
    l.put_bucket_config("bkt", "cors", Bytes::from_static(b"<b/>"))
        .await
        .unwrap();
    assert_eq!(
        l.get_bucket_config("bkt", "cors").await.unwrap().unwrap(),
        &b"<b/>"[..]
    );
    l.delete_bucket_config("bkt", "cors").await.unwrap();
    assert_eq!(l.get_bucket_config("bkt", "cors").await.unwrap(), None);
    l.delete_bucket_config("bkt", "cors").await.unwrap();
}

#[tokio::test]
async fn missing_bucket() {
    let f = fixture(4).await;
    let l = &f.layer;
    assert!(matches!(
        l.get_bucket_config("nope", "cors").await,
        Err(Error::BucketNotFound)
    ));
    assert!(matches!(
        l.put_bucket_config("nope", "cors", Bytes::from_static(b"x"))
            .await,
        Err(Error::BucketNotFound)
    ));
    // Deleting the bucket removes its configuration; a new bucket of that name starts clean.
    l.put_bucket_config("bkt", "cors", Bytes::from_static(b"x"))
        .await
        .unwrap();
    l.delete_bucket("bkt").await.unwrap();
    l.make_bucket("bkt").await.unwrap();
    assert_eq!(l.get_bucket_config("bkt", "cors").await.unwrap(), None);
}

#[tokio::test]
async fn read_takes_the_value_a_quorum_agrees_on() {
    // 4 drives, 2+2: read quorum 2.
    let f = fixture(4).await;
    let l = &f.layer;
    l.put_bucket_config("bkt", "cors", Bytes::from_static(b"good"))
        .await
        .unwrap();
    // One drive lost it, another holds garbage: two still agree.
    std::fs::remove_file(blob(&f, 0)).unwrap();
    std::fs::write(blob(&f, 1), b"garbage").unwrap();
    assert_eq!(
        l.get_bucket_config("bkt", "cors").await.unwrap().unwrap(),
        &b"good"[..]
    );
    // A third drive with another value: no two drives agree on a value, and only one says
    // "not set": no quorum either way.
    let other = ConfigEnvelope {
        updated_ns: 1,
        payload: Bytes::from_static(b"other"),
    }
    .encode();
    std::fs::write(blob(&f, 2), &other).unwrap();
    assert!(matches!(
        l.get_bucket_config("bkt", "cors").await,
        Err(Error::ReadQuorum { .. })
    ));
}

#[tokio::test]
async fn unknown_envelope_version_is_an_error_not_a_guess() {
    let f = fixture(2).await;
    let l = &f.layer;
    l.put_bucket_config("bkt", "cors", Bytes::from_static(b"x"))
        .await
        .unwrap();
    for i in 0..2 {
        let mut raw = std::fs::read(blob(&f, i)).unwrap();
        raw[4] = 7;
        std::fs::write(blob(&f, i), &raw).unwrap();
    }
    assert!(matches!(
        l.get_bucket_config("bkt", "cors").await,
        Err(Error::Corrupt(_))
    ));
}
