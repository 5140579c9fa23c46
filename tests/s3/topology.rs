//! Drive counts other than four: one drive (no erasure coding) and a few other set sizes.

use quarry_integration::*;

const MIB: usize = 1 << 20;

#[tokio::test]
async fn single_drive_put_get_list_delete() {
    let mut s = TestServer::start(1).await;
    let c = s.client();
    s.create_bucket("one").await;
    let small = random_bytes(1000);
    let large = random_bytes(2 * MIB + 1);
    put_bytes(&c, "one", "small", &small).await;
    put_bytes(&c, "one", "dir/large", &large).await;
    assert_bytes_eq(&get_bytes(&c, "one", "small").await, &small, "small");
    assert_bytes_eq(&get_bytes(&c, "one", "dir/large").await, &large, "large");
    let meta =
        read_meta(s.drive_path(0), "one", "dir/large").expect("quarry.meta on the only drive");
    assert_eq!(
        meta["erasure"]["data"].as_u64(),
        Some(1),
        "one drive: one data shard"
    );
    assert_eq!(
        meta["erasure"]["parity"].as_u64(),
        Some(0),
        "one drive: no parity"
    );

    let l = c
        .list_objects_v2()
        .bucket("one")
        .delimiter("/")
        .send()
        .await
        .expect("list");
    let keys: Vec<_> = l
        .contents()
        .iter()
        .map(|o| o.key().unwrap_or_default())
        .collect();
    let prefixes: Vec<_> = l
        .common_prefixes()
        .iter()
        .map(|p| p.prefix().unwrap_or_default())
        .collect();
    assert_eq!(keys, ["small"]);
    assert_eq!(prefixes, ["dir/"]);

    let r = c
        .get_object()
        .bucket("one")
        .key("dir/large")
        .range("bytes=1048570-1048590")
        .send()
        .await
        .expect("range");
    assert_bytes_eq(
        &r.body.collect().await.expect("body").into_bytes(),
        &large[MIB - 6..=MIB + 14],
        "range",
    );

    s.restart().await;
    let c = s.client();
    assert_bytes_eq(
        &get_bytes(&c, "one", "dir/large").await,
        &large,
        "large after restart",
    );
    c.delete_object()
        .bucket("one")
        .key("small")
        .send()
        .await
        .expect("delete");
    assert_s3_error(
        c.get_object().bucket("one").key("small").send().await,
        404,
        "NoSuchKey",
    );
}

#[tokio::test]
async fn other_drive_counts() {
    // (drives, data, parity) as in DESIGN.md: 2-3 drives m=1, 4-5 m=2, 6-7 m=3, 8+ m=4.
    for (drives, data_shards, parity) in [(2u64, 1u64, 1u64), (3, 2, 1), (6, 3, 3), (16, 12, 4)] {
        let s = TestServer::start(drives as usize).await;
        let c = s.client();
        s.create_bucket("set").await;
        let data = random_bytes(3 * MIB + 3);
        put_bytes(&c, "set", "obj", &data).await;
        assert_bytes_eq(
            &get_bytes(&c, "set", "obj").await,
            &data,
            &format!("{drives} drives"),
        );
        let meta = read_meta(s.drive_path(0), "set", "obj").expect("meta");
        assert_eq!(
            meta["erasure"]["data"].as_u64(),
            Some(data_shards),
            "{drives} drives: data shards"
        );
        assert_eq!(
            meta["erasure"]["parity"].as_u64(),
            Some(parity),
            "{drives} drives: parity shards"
        );
        // Lose as many shards as there is parity: still readable.
        let mut removed = 0;
        for i in 0..drives as usize {
            if removed == parity {
                break;
            }
            if let Some(p) = part_path(s.drive_path(i), "set", "obj") {
                std::fs::remove_file(p).expect("remove shard");
                removed += 1;
            }
        }
        assert_eq!(removed, parity);
        assert_bytes_eq(
            &get_bytes(&c, "set", "obj").await,
            &data,
            &format!("{drives} drives, {parity} shards lost"),
        );
    }
}
