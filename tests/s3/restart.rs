//! Restarts: objects, metadata and generated credentials survive a stop and start.

use std::collections::HashMap;
use std::time::Duration;

use quarry_integration::*;

const MIB: usize = 1 << 20;

#[tokio::test]
async fn restart_keeps_every_object() {
    let mut s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("keep").await;
    s.create_bucket("keep2").await;
    let mut objects: HashMap<String, Vec<u8>> = HashMap::new();
    for (key, size) in [
        ("empty", 0),
        ("one", 1),
        ("small/inline", 5000),
        ("big/one", 3 * MIB + 9),
        ("big/two", MIB),
    ] {
        let data = random_bytes(size);
        put_bytes(&c, "keep", key, &data).await;
        objects.insert(key.to_string(), data);
    }
    c.put_object()
        .bucket("keep2")
        .key("with-meta")
        .content_type("text/plain")
        .metadata("k", "v")
        .body(b"meta".to_vec().into())
        .send()
        .await
        .expect("put with metadata");
    // Deleted before the restart: stays deleted.
    put_bytes(&c, "keep", "gone", b"x").await;
    c.delete_object()
        .bucket("keep")
        .key("gone")
        .send()
        .await
        .expect("delete");

    s.restart().await;
    assert_eq!(s.starts(), 2);
    let c = s.client();
    let buckets: Vec<String> = c
        .list_buckets()
        .send()
        .await
        .expect("list buckets")
        .buckets()
        .iter()
        .map(|b| b.name().unwrap_or_default().to_string())
        .collect();
    assert_eq!(buckets, ["keep", "keep2"]);
    for (key, data) in &objects {
        assert_bytes_eq(
            &get_bytes(&c, "keep", key).await,
            data,
            &format!("{key} after restart"),
        );
    }
    let mut listed: Vec<String> = c
        .list_objects_v2()
        .bucket("keep")
        .send()
        .await
        .expect("list")
        .contents()
        .iter()
        .map(|o| o.key().unwrap_or_default().to_string())
        .collect();
    listed.sort();
    let mut want: Vec<String> = objects.keys().cloned().collect();
    want.sort();
    assert_eq!(listed, want, "listing after restart");
    let h = c
        .head_object()
        .bucket("keep2")
        .key("with-meta")
        .send()
        .await
        .expect("head");
    assert_eq!(h.content_type(), Some("text/plain"));
    assert_eq!(
        h.metadata().and_then(|m| m.get("k")).map(String::as_str),
        Some("v")
    );
    assert_s3_error(
        c.get_object().bucket("keep").key("gone").send().await,
        404,
        "NoSuchKey",
    );

    // Still writable after the restart, and a second restart changes nothing.
    put_bytes(&c, "keep", "after", b"after restart").await;
    s.restart().await;
    assert_eq!(
        get_bytes(&s.client(), "keep", "after").await,
        b"after restart"
    );
    assert_bytes_eq(
        &get_bytes(&s.client(), "keep", "big/one").await,
        &objects["big/one"],
        "big/one after 2 restarts",
    );
}

#[tokio::test]
async fn generated_credentials_are_stored_and_stable() {
    let mut s = TestServer::start_with(4, CredentialMode::Generated).await;
    let (ak, sk) = (s.access_key().to_string(), s.secret_key().to_string());
    assert_ne!(
        ak, ACCESS_KEY,
        "credentials were generated, not the test ones"
    );
    assert!(
        ak.len() >= 8 && sk.len() >= 16,
        "generated keys are not trivially short: {ak:?}"
    );

    // Stored under .quarry.sys with mode 0600.
    let mut found = 0;
    for i in 0..s.drive_count() {
        let p = s.drive_path(i).join(".quarry.sys").join("credentials.json");
        if let Ok(md) = std::fs::metadata(&p) {
            use std::os::unix::fs::PermissionsExt;
            found += 1;
            assert_eq!(
                md.permissions().mode() & 0o777,
                0o600,
                "{} mode",
                p.display()
            );
            let text = std::fs::read_to_string(&p).expect("read credentials.json");
            assert!(
                text.contains(&ak) && text.contains(&sk),
                "{} holds the printed keys",
                p.display()
            );
        }
    }
    assert!(found >= 1, "no .quarry.sys/credentials.json on any drive");

    let c = s.client();
    s.create_bucket("cred").await;
    put_bytes(&c, "cred", "k", b"v").await;
    // The test credentials are not accepted.
    assert_s3_error(
        s.client_with(ACCESS_KEY, SECRET_KEY)
            .list_buckets()
            .send()
            .await,
        403,
        "InvalidAccessKeyId",
    );

    s.restart().await;
    assert_eq!(s.access_key(), ak, "access key after restart");
    assert_eq!(s.secret_key(), sk, "secret key after restart");
    assert_eq!(get_bytes(&s.client(), "cred", "k").await, b"v");

    // Every drive replaced in turn while the server runs: each is formatted into its slot and
    // gets the keys back, so a restart after the last one still has them (none is generated).
    s.set_env("QUARRY_DRIVE_CHECK_INTERVAL", "1");
    s.restart().await;
    for i in 0..s.drive_count() {
        let drive = s.drive_path(i).to_path_buf();
        std::fs::remove_dir_all(&drive).unwrap();
        std::fs::create_dir_all(&drive).unwrap();
        let creds = drive.join(".quarry.sys").join("credentials.json");
        let heal_done = || {
            creds.exists()
                && drive.join(".quarry.sys/format.json").exists()
                && !drive.join(".quarry.sys/healing.json").exists()
        };
        assert!(
            wait_until(Duration::from_secs(60), heal_done).await,
            "drive {i} not formatted, healed and given the keys back:\n{}",
            s.log_tail(40)
        );
        let text = std::fs::read_to_string(&creds).expect("read credentials.json");
        assert!(text.contains(&ak) && text.contains(&sk), "drive {i}");
    }
    s.restart().await;
    assert_eq!(
        s.access_key(),
        ak,
        "access key after every drive was replaced"
    );
    assert_eq!(
        s.secret_key(),
        sk,
        "secret key after every drive was replaced"
    );
    assert_eq!(get_bytes(&s.client(), "cred", "k").await, b"v");
}
