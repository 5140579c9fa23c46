//! Clusters of real processes on 127.0.0.1: placement across sets and nodes, listing merged
//! across sets, one node down (reads and writes go on, missed writes heal when it returns), two
//! nodes down (reads go on, writes fail cleanly), concurrent writers of one key on different
//! nodes, and a node started with another layout refused.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use quarry_integration::*;

fn client_for(s: &TestServer, node: usize) -> aws_sdk_s3::Client {
    s.node_client(node)
}

async fn put(c: &aws_sdk_s3::Client, bucket: &str, key: &str, body: Vec<u8>) {
    if let Err(e) = c
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body))
        .send()
        .await
    {
        panic!("PUT {key}: {}", describe(&e));
    }
}

async fn get(c: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Vec<u8> {
    match c.get_object().bucket(bucket).key(key).send().await {
        Ok(o) => o.body.collect().await.expect("read body").to_vec(),
        Err(e) => panic!("GET {key}: {}", describe(&e)),
    }
}

/// Every key listed through `c` (ListObjectsV2 with pages of `page`).
async fn list_all(c: &aws_sdk_s3::Client, bucket: &str, prefix: &str, page: i32) -> Vec<String> {
    let mut keys = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let r = c
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .max_keys(page)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("list: {}", describe(&e)));
        keys.extend(
            r.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_string)),
        );
        if r.is_truncated() == Some(true) {
            token = r.next_continuation_token().map(str::to_string);
            assert!(token.is_some(), "truncated page without a token");
        } else {
            return keys;
        }
    }
}

fn deployment_of(drive: &Path) -> String {
    let f = std::fs::read_to_string(drive.join(".quarry.sys/format.json"))
        .unwrap_or_else(|e| panic!("{}: format.json: {e}", drive.display()));
    let v: serde_json::Value = serde_json::from_str(&f).expect("format.json is JSON");
    v["deployment_id"]
        .as_str()
        .expect("deployment_id")
        .to_string()
}

#[tokio::test]
async fn four_nodes_two_sets_place_list_and_agree_on_one_deployment() {
    // 4 nodes x 2 drives in sets of 4: 2 sets, each spanning the 4 nodes.
    let s = TestServer::start_cluster(4, 2, 4).await;
    // Formatted once: every drive of every node names the same deployment.
    let ids: BTreeSet<String> = (0..s.drive_count())
        .map(|d| deployment_of(s.drive_path(d)))
        .collect();
    assert_eq!(ids.len(), 1, "drives disagree on the deployment: {ids:?}");

    let c0 = client_for(&s, 0);
    c0.create_bucket().bucket("spread").send().await.unwrap();
    let mut want = BTreeSet::new();
    for i in 0..60 {
        let key = format!("dir{}/obj{i:03}", i % 3);
        let c = client_for(&s, i % 4);
        put(&c, "spread", &key, format!("body of {key}").into_bytes()).await;
        want.insert(key);
    }
    // Both sets got objects: the first drive of each node is in set 0, the second in set 1.
    let count = |d: usize| {
        list_files(s.drive_path(d))
            .iter()
            .filter(|p| p.ends_with("quarry.meta"))
            .count()
    };
    let (set0, set1) = (count(0), count(1));
    assert!(
        set0 > 0 && set1 > 0,
        "objects in set 0: {set0}, set 1: {set1}"
    );
    assert_eq!(set0 + set1, 60);

    // Listing through every node, in small pages, merges both sets.
    let want: Vec<String> = want.into_iter().collect();
    for node in 0..4 {
        let c = client_for(&s, node);
        assert_eq!(list_all(&c, "spread", "", 7).await, want, "node {node}");
        let dir1: Vec<String> = want
            .iter()
            .filter(|k| k.starts_with("dir1/"))
            .cloned()
            .collect();
        assert_eq!(
            list_all(&c, "spread", "dir1/", 3).await,
            dir1,
            "node {node}"
        );
        let r = c
            .list_objects_v2()
            .bucket("spread")
            .delimiter("/")
            .send()
            .await
            .unwrap();
        let prefixes: Vec<&str> = r
            .common_prefixes()
            .iter()
            .filter_map(|p| p.prefix())
            .collect();
        assert_eq!(prefixes, ["dir0/", "dir1/", "dir2/"], "node {node}");
    }
    // Any node reads what any other wrote.
    for (i, key) in want.iter().enumerate().step_by(7) {
        let c = client_for(&s, (i + 1) % 4);
        assert_eq!(
            get(&c, "spread", key).await,
            format!("body of {key}").into_bytes()
        );
    }
}

/// Waits until `check` holds, up to `limit`; returns how long it took.
async fn wait_for(limit: Duration, mut check: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if check() {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test]
async fn one_node_down_keeps_serving_and_heals_when_it_returns() {
    // 4 nodes x 1 drive: one 2+2 set spanning them.
    let mut s = TestServer::start_cluster(4, 1, 4).await;
    let c = client_for(&s, 0);
    c.create_bucket().bucket("outage").send().await.unwrap();
    let big = random_bytes(3 << 20);
    put(&c, "outage", "before", big.clone()).await;

    s.kill_node(3);
    // Reads and writes go on through the other nodes (3 of 4 drives: write quorum 3).
    for node in 0..3 {
        assert_eq!(get(&client_for(&s, node), "outage", "before").await, big);
    }
    let mut missed = Vec::new();
    for i in 0..10 {
        let key = format!("during/{i}");
        let body = if i % 2 == 0 {
            random_bytes(200 << 10)
        } else {
            random_bytes(100)
        };
        put(&client_for(&s, i % 3), "outage", &key, body.clone()).await;
        missed.push((key, body));
    }
    let listed = list_all(&client_for(&s, 1), "outage", "during/", 4).await;
    assert_eq!(listed.len(), 10);
    let down_drive = s.drive_path(3).to_path_buf();
    assert!(read_meta(&down_drive, "outage", "during/0").is_none());

    // The node returns: the heal queue brings its drive in line.
    s.start_node(3).await;
    let took = wait_for(Duration::from_secs(90), || {
        missed
            .iter()
            .all(|(k, _)| read_meta(&down_drive, "outage", k).is_some())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the returned node's drive was not healed within 90 s; node 1 log:\n{}",
            s.node_log_tail(0, 40)
        )
    });
    eprintln!(
        "healed {} objects on the returned node in {took:?}",
        missed.len()
    );
    // The healed drive serves: with two other nodes down, reads need it.
    s.kill_node(1);
    s.kill_node(2);
    let c = client_for(&s, 0);
    for (k, body) in &missed {
        assert_eq!(&get(&c, "outage", k).await, body, "{k} after heal");
    }
}

#[tokio::test]
async fn two_nodes_down_reads_work_and_writes_fail_cleanly() {
    let mut s = TestServer::start_cluster(4, 1, 4).await;
    let c = client_for(&s, 0);
    c.create_bucket().bucket("halfdown").send().await.unwrap();
    let big = random_bytes((2 << 20) + 17);
    put(&c, "halfdown", "big", big.clone()).await;
    put(&c, "halfdown", "small", b"tiny".to_vec()).await;
    s.kill_node(2);
    s.kill_node(3);
    for node in 0..2 {
        let c = client_for(&s, node);
        assert_eq!(get(&c, "halfdown", "big").await, big);
        assert_eq!(get(&c, "halfdown", "small").await, b"tiny");
        assert_eq!(list_all(&c, "halfdown", "", 1000).await, ["big", "small"]);
    }
    let err = c
        .put_object()
        .bucket("halfdown")
        .key("new")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .expect_err("a write with 2 of 4 drives must fail");
    assert_eq!(error_status(&err), Some(503), "{}", describe(&err));
    assert_eq!(error_code(&err).as_deref(), Some("ServiceUnavailable"));
    // Nothing half-written became visible.
    let e = c.head_object().bucket("halfdown").key("new").send().await;
    assert!(e.is_err());
}

#[tokio::test]
async fn concurrent_writers_on_different_nodes_never_mix_versions() {
    let s = TestServer::start_cluster(4, 1, 4).await;
    client_for(&s, 0)
        .create_bucket()
        .bucket("race")
        .send()
        .await
        .unwrap();
    for round in 0..4 {
        let mut tasks = Vec::new();
        let bodies: Vec<Vec<u8>> = (0..4u8)
            .map(|w| vec![w + round * 4; (1 << 20) + 3 + w as usize])
            .collect();
        for (w, body) in bodies.iter().enumerate() {
            let c = client_for(&s, w);
            let body = body.clone();
            tasks.push(tokio::spawn(async move {
                c.put_object()
                    .bucket("race")
                    .key("contended")
                    .body(ByteStream::from(body))
                    .send()
                    .await
                    .is_ok()
            }));
        }
        let mut ok = 0;
        for t in tasks {
            ok += t.await.unwrap() as usize;
        }
        assert!(ok >= 1, "round {round}: no writer succeeded");
        for node in 0..4 {
            let got = get(&client_for(&s, node), "race", "contended").await;
            assert!(
                bodies.contains(&got),
                "round {round}, node {node}: the object is no single writer's body ({} bytes, first byte {:?})",
                got.len(),
                got.first()
            );
        }
    }
}

#[tokio::test]
async fn a_node_with_another_layout_is_refused() {
    let mut s = TestServer::start_cluster(4, 1, 4).await;
    s.kill_node(3);
    // Node 4 comes back with a different drive list (another directory for its drive).
    let mut args = s.drive_args();
    let last = args.pop().unwrap();
    args.push(format!("{last}-other"));
    let port = s.node_endpoint(3).rsplit(':').next().unwrap().to_string();
    let out = Command::new(quarry_bin())
        .arg("server")
        .args(&args)
        .arg("--set-size")
        .arg("4")
        .arg("--address")
        .arg(format!("127.0.0.1:{port}"))
        .env("QUARRY_ROOT_USER", ACCESS_KEY)
        .env("QUARRY_ROOT_PASSWORD", SECRET_KEY)
        .stdin(Stdio::null())
        .output_with_timeout(Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.1);
    assert!(
        out.0.is_some_and(|c| c != 0),
        "it must exit with an error; output:\n{text}"
    );
    assert!(
        text.contains("refuse this node") && text.contains("another layout"),
        "the error must say why: {text}"
    );
    // The cluster still serves.
    let c = client_for(&s, 0);
    c.create_bucket().bucket("stillup").send().await.unwrap();
}

/// `Command::output` with a bound: `(exit code, stdout + stderr)`; kills the process at the
/// limit (exit code `None`).
trait OutputWithTimeout {
    fn output_with_timeout(&mut self, limit: Duration) -> (Option<i32>, Vec<u8>);
}

impl OutputWithTimeout for Command {
    fn output_with_timeout(&mut self, limit: Duration) -> (Option<i32>, Vec<u8>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("out");
        let f = std::fs::File::create(&path).expect("create output file");
        let mut child = self
            .stdout(f.try_clone().expect("clone"))
            .stderr(f)
            .spawn()
            .expect("spawn quarry");
        let t0 = Instant::now();
        let code = loop {
            if let Ok(Some(st)) = child.try_wait() {
                break st.code();
            }
            if t0.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        (code, std::fs::read(&path).unwrap_or_default())
    }
}

/// A node that was down while a versioned key got a new version and a delete marker gets both
/// back from heal, and then serves the old and the new version with two other nodes down.
#[tokio::test]
async fn a_node_that_missed_versions_and_a_marker_gets_them_back() {
    use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
    let mut s = TestServer::start_cluster(4, 1, 4).await;
    let c = client_for(&s, 0);
    c.create_bucket().bucket("vheal").send().await.unwrap();
    c.put_bucket_versioning()
        .bucket("vheal")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let old = random_bytes(300 << 10);
    let v1 = c
        .put_object()
        .bucket("vheal")
        .key("k")
        .body(ByteStream::from(old.clone()))
        .send()
        .await
        .unwrap()
        .version_id
        .unwrap();

    s.kill_node(3);
    let new = random_bytes(200 << 10);
    let v2 = client_for(&s, 1)
        .put_object()
        .bucket("vheal")
        .key("k")
        .body(ByteStream::from(new.clone()))
        .send()
        .await
        .unwrap()
        .version_id
        .unwrap();
    let marker = client_for(&s, 2)
        .delete_object()
        .bucket("vheal")
        .key("k")
        .send()
        .await
        .unwrap()
        .version_id
        .unwrap();
    let meta = s.drive_path(3).join("vheal/k/quarry.meta");
    let holds = |id: &str| {
        std::fs::read(&meta)
            .map(|b| String::from_utf8_lossy(&b).contains(id))
            .unwrap_or(false)
    };
    assert!(holds(&v1) && !holds(&v2) && !holds(&marker));

    s.start_node(3).await;
    wait_for(Duration::from_secs(90), || holds(&v2) && holds(&marker))
        .await
        .unwrap_or_else(|| {
            panic!(
                "the returned node did not get the missed version and marker; node 1 log:\n{}",
                s.node_log_tail(0, 40)
            )
        });
    // Its drive is needed now: two of the four are gone.
    s.kill_node(1);
    s.kill_node(2);
    let c = client_for(&s, 0);
    let get = |v: String| {
        let c = c.clone();
        async move {
            c.get_object()
                .bucket("vheal")
                .key("k")
                .version_id(v)
                .send()
                .await
                .unwrap()
                .body
                .collect()
                .await
                .unwrap()
                .into_bytes()
                .to_vec()
        }
    };
    assert_eq!(get(v1).await, old);
    assert_eq!(get(v2).await, new);
    let r = c.get_object().bucket("vheal").key("k").send().await;
    assert_eq!(error_status(&r.unwrap_err()), Some(404));
}

/// How long a node may apply a bucket configuration changed through another node: the write
/// path's configuration cache TTL (`quarry_object::CONFIG_CACHE_TTL`, 1 s), and a margin.
const CONFIG_BOUND: Duration = Duration::from_millis(1500);

/// The version id a PUT through `c` got: `None` for the null version.
async fn put_version(c: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Option<String> {
    match c
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(b"v".to_vec()))
        .send()
        .await
    {
        Ok(o) => o.version_id.filter(|v| v != "null"),
        Err(e) => panic!("PUT {key}: {}", describe(&e)),
    }
}

async fn set_versioning(
    c: &aws_sdk_s3::Client,
    bucket: &str,
    status: aws_sdk_s3::types::BucketVersioningStatus,
) {
    c.put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(
            aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(status)
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("versioning of {bucket}: {}", describe(&e)));
}

/// The lock mode a new object of `bucket` got through `c`.
async fn put_lock_mode(c: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Option<String> {
    put_version(c, bucket, key).await;
    let head = c.head_object().bucket(bucket).key(key).send().await;
    let head = head.unwrap_or_else(|e| panic!("HEAD {key}: {}", describe(&e)));
    head.object_lock_mode.map(|m| m.as_str().to_owned())
}

/// Writes apply the bucket's versioning and lock configuration from a per-node cache, and reads
/// name null versions by it: a change applies at once to the next request through the node that
/// made it (each node's cache is warm with the old value first), and within the cache's bound
/// to requests through the other node.
#[tokio::test]
async fn bucket_config_changes_reach_writes_on_every_node_within_the_cache_bound() {
    use aws_sdk_s3::types::{
        BucketVersioningStatus, DefaultRetention, ObjectLockConfiguration, ObjectLockEnabled,
        ObjectLockRetentionMode, ObjectLockRule,
    };
    let s = TestServer::start_cluster(2, 2, 4).await;
    let (a, b) = (client_for(&s, 0), client_for(&s, 1));
    a.create_bucket().bucket("cfg").send().await.unwrap();
    assert_eq!(put_version(&a, "cfg", "k").await, None);
    assert_eq!(put_version(&b, "cfg", "k").await, None);
    // Reads name a null version once the bucket is versioned (from the same cache).
    assert_eq!(put_version(&a, "cfg", "n").await, None);
    let named = |c: &aws_sdk_s3::Client| {
        let c = c.clone();
        async move {
            let head = c.head_object().bucket("cfg").key("n").send().await;
            head.unwrap_or_else(|e| panic!("HEAD n: {}", describe(&e)))
                .version_id
        }
    };
    assert_eq!(named(&a).await, None);
    assert_eq!(named(&b).await, None);

    set_versioning(&a, "cfg", BucketVersioningStatus::Enabled).await;
    assert!(
        put_version(&a, "cfg", "k").await.is_some(),
        "node a, at once"
    );
    assert_eq!(named(&a).await.as_deref(), Some("null"), "node a, at once");
    tokio::time::sleep(CONFIG_BOUND).await;
    assert!(
        put_version(&b, "cfg", "k").await.is_some(),
        "node b, within the bound"
    );
    assert_eq!(
        named(&b).await.as_deref(),
        Some("null"),
        "node b, within the bound"
    );

    set_versioning(&b, "cfg", BucketVersioningStatus::Suspended).await;
    assert_eq!(put_version(&b, "cfg", "k").await, None, "node b, at once");
    tokio::time::sleep(CONFIG_BOUND).await;
    assert_eq!(
        put_version(&a, "cfg", "k").await,
        None,
        "node a, within the bound"
    );

    // A lock-enabled bucket gets a default retention through b: b's next write has it at once,
    // a's within the bound.
    a.create_bucket()
        .bucket("locked")
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    assert_eq!(put_lock_mode(&a, "locked", "x").await, None);
    assert_eq!(put_lock_mode(&b, "locked", "x").await, None);
    let conf = ObjectLockConfiguration::builder()
        .object_lock_enabled(ObjectLockEnabled::Enabled)
        .rule(
            ObjectLockRule::builder()
                .default_retention(
                    DefaultRetention::builder()
                        .mode(ObjectLockRetentionMode::Governance)
                        .days(1)
                        .build(),
                )
                .build(),
        )
        .build();
    b.put_object_lock_configuration()
        .bucket("locked")
        .object_lock_configuration(conf)
        .send()
        .await
        .unwrap();
    let governance = Some("GOVERNANCE".to_owned());
    assert_eq!(
        put_lock_mode(&b, "locked", "y").await,
        governance,
        "node b, at once"
    );
    tokio::time::sleep(CONFIG_BOUND).await;
    assert_eq!(
        put_lock_mode(&a, "locked", "z").await,
        governance,
        "node a, within the bound"
    );
}
