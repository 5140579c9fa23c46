//! `/metrics` on a real server: behind a bearer token (or public by choice), every line valid Prometheus text exposition, and the
//! counters move with the requests, the heals and the drives.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use quarry_integration::aws_sdk_s3::primitives::ByteStream;
use quarry_integration::*;

/// One sample: metric name, labels, value.
pub(crate) type Sample = (String, BTreeMap<String, String>, f64);

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses the exposition text, panicking on the first line that is not valid: comments are
/// `# HELP name text` or `# TYPE name counter|gauge|histogram|summary|untyped`, declared once
/// and before the samples; a sample is `name{label="value",...} number`, and its family has a
/// TYPE (histogram samples end in `_bucket`, `_sum` or `_count`).
pub(crate) fn parse(text: &str) -> Vec<Sample> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kw, name) = (parts.next().unwrap(), parts.next().unwrap_or(""));
            assert!(is_name(name), "bad metric name in {line:?}");
            match kw {
                "HELP" => assert!(parts.next().is_some_and(|h| !h.is_empty()), "{line:?}"),
                "TYPE" => {
                    let t = parts.next().unwrap_or("");
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                        "{line:?}"
                    );
                    assert!(
                        types.insert(name.to_owned(), t.to_owned()).is_none(),
                        "TYPE twice: {line:?}"
                    );
                }
                _ => panic!("unknown comment {line:?}"),
            }
            continue;
        }
        let (name_end, mut labels) = (line.find(['{', ' ']).expect("a value"), BTreeMap::new());
        let name = &line[..name_end];
        assert!(is_name(name), "bad metric name in {line:?}");
        let mut rest = &line[name_end..];
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices().peekable();
            let end;
            loop {
                // label name
                let start = chars.peek().map(|(i, _)| *i).expect("label");
                if inner[start..].starts_with('}') {
                    end = start;
                    break;
                }
                let eq = inner[start..].find('=').expect("label=") + start;
                let key = &inner[start..eq];
                assert!(
                    is_name(key) && !key.starts_with("__"),
                    "bad label {key:?} in {line:?}"
                );
                assert!(inner[eq + 1..].starts_with('"'), "{line:?}");
                while chars.peek().is_some_and(|(i, _)| *i <= eq + 1) {
                    chars.next();
                }
                let mut value = String::new();
                loop {
                    let (_, c) = chars.next().expect("closing quote");
                    match c {
                        '\\' => match chars.next().expect("escape").1 {
                            'n' => value.push('\n'),
                            '\\' => value.push('\\'),
                            '"' => value.push('"'),
                            other => panic!("bad escape \\{other} in {line:?}"),
                        },
                        '"' => break,
                        '\n' => panic!("raw newline in {line:?}"),
                        c => value.push(c),
                    }
                }
                assert!(
                    labels.insert(key.to_owned(), value).is_none(),
                    "label twice: {line:?}"
                );
                match chars.next() {
                    Some((_, ',')) => continue,
                    Some((i, '}')) => {
                        end = i;
                        break;
                    }
                    other => panic!("expected , or }} after a label, got {other:?} in {line:?}"),
                }
            }
            rest = &inner[end + 1..];
        }
        let value = rest.strip_prefix(' ').expect("space before the value");
        let value = value.split(' ').next().unwrap(); // an optional timestamp may follow
        let v: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).map(String::as_str) == Some("histogram"))
            })
            .unwrap_or(name);
        assert!(
            types.contains_key(family),
            "sample before (or without) its TYPE: {line:?}"
        );
        samples.push((name.to_owned(), labels, v));
    }
    samples
}

async fn scrape(s: &TestServer) -> Vec<Sample> {
    let resp = metrics_get(&format!("{}/metrics", s.endpoint())).await;
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    parse(&resp.text().await.unwrap())
}

/// The value of the sample `name` with exactly these labels (0 when absent: counters start there).
pub(crate) fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && l.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map_or(0.0, |s| s.2)
}

#[tokio::test]
async fn metrics_are_valid_exposition_and_move_with_requests() {
    let s = TestServer::start(4).await;
    let before = scrape(&s).await;
    assert_eq!(value(&before, "quarry_drives", &[("state", "online")]), 4.0);
    assert_eq!(
        value(&before, "quarry_drives", &[("state", "offline")]),
        0.0
    );
    assert_eq!(value(&before, "quarry_heal_queue_length", &[]), 0.0);

    let c = s.client();
    s.create_bucket("mtest").await;
    let data = random_bytes(300_000);
    c.put_object()
        .bucket("mtest")
        .key("obj")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();
    let got = c
        .get_object()
        .bucket("mtest")
        .key("obj")
        .send()
        .await
        .unwrap();
    let body = got.body.collect().await.unwrap().into_bytes();
    assert_eq!(body.len(), data.len());
    let missing = c.get_object().bucket("mtest").key("nope").send().await;
    assert_eq!(error_status(&missing.unwrap_err()), Some(404));

    let after = scrape(&s).await;
    let req = |v: &[Sample], op: &str, code: &str| {
        value(v, "quarry_s3_requests_total", &[("op", op), ("code", code)])
    };
    assert_eq!(
        req(&after, "PutObject", "200") - req(&before, "PutObject", "200"),
        1.0
    );
    assert_eq!(
        req(&after, "GetObject", "200") - req(&before, "GetObject", "200"),
        1.0
    );
    assert_eq!(req(&after, "GetObject", "404"), 1.0);
    assert_eq!(req(&after, "CreateBucket", "200"), 1.0);
    // The first scrape is counted once it has been sent.
    assert!(req(&after, "Metrics", "200") >= 1.0);
    let op = |name: &str, o: &str| value(&after, name, &[("op", o)]);
    assert!(op("quarry_s3_received_bytes_total", "PutObject") >= data.len() as f64);
    assert!(op("quarry_s3_sent_bytes_total", "GetObject") >= data.len() as f64);
    let count = op("quarry_s3_request_duration_seconds_count", "GetObject");
    assert_eq!(count, 2.0);
    assert_eq!(
        value(
            &after,
            "quarry_s3_request_duration_seconds_bucket",
            &[("op", "GetObject"), ("le", "+Inf")]
        ),
        count
    );
    assert!(op("quarry_s3_request_duration_seconds_sum", "GetObject") > 0.0);
    // A healthy GET of an object stored in shard files copies nothing: the body is the data
    // chunks as they were read (in a cluster, as they landed in pooled buffers from the peers).
    assert_eq!(value(&after, "quarry_get_copied_bytes_total", &[]), 0.0);

    // One drive loses the object: the next read queues a heal, the worker rewrites it.
    std::fs::remove_dir_all(object_dir(s.drive_path(1), "mtest", "obj")).unwrap();
    let got = c
        .get_object()
        .bucket("mtest")
        .key("obj")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().len(),
        data.len()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = scrape(&s).await;
        if value(&now, "quarry_healed_objects_total", &[]) >= 1.0 {
            assert!(value(&now, "quarry_heal_queued_total", &[]) >= 1.0);
            assert_eq!(value(&now, "quarry_heal_queue_length", &[]), 0.0);
            break;
        }
        assert!(Instant::now() < deadline, "no heal counted within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A drive whose directory is gone is offline (drive states are cached for 2 s, so within
    // a few seconds).
    let gone = s.drive_path(3).with_extension("gone");
    std::fs::rename(s.drive_path(3), &gone).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let now = loop {
        let now = scrape(&s).await;
        if value(&now, "quarry_drives", &[("state", "offline")]) == 1.0 || Instant::now() > deadline
        {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    std::fs::rename(&gone, s.drive_path(3)).unwrap();
    assert_eq!(value(&now, "quarry_drives", &[("state", "offline")]), 1.0);
    assert_eq!(value(&now, "quarry_drives", &[("state", "online")]), 3.0);
    let drive = s.drive_path(3).display().to_string();
    assert_eq!(
        value(&now, "quarry_drive_online", &[("drive", &drive)]),
        0.0
    );
}

/// `/metrics` names drive paths and peers: it takes the server's bearer token, anonymous and
/// wrong-token requests are refused (403 AccessDenied), and anonymous access is there only when
/// chosen (`QUARRY_METRICS_PUBLIC`). A signed request is S3, as before.
#[tokio::test]
async fn metrics_need_a_bearer_token_or_an_explicit_public_choice() {
    let mut s = TestServer::start_single(4).await;
    let url = format!("{}/metrics", s.endpoint());
    let client = reqwest::Client::new();
    // Control: the token opens it; HEAD works too, with no body.
    assert_eq!(metrics_get(&url).await.status(), 200);
    let resp = client
        .head(&url)
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // No token, a wrong one, or one in another scheme: refused, with no figure in the answer.
    for req in [
        client.get(&url),
        client
            .get(&url)
            .bearer_auth("quarry-test-metrics-token-012345678X"),
        client.get(&url).bearer_auth(""),
    ] {
        let resp = req.send().await.unwrap();
        let body = expect_raw_error(resp, 403, "AccessDenied").await;
        assert!(!body.contains("quarry_"), "{body}");
    }
    // Signed, `/metrics` is the bucket named `metrics`, which does not exist.
    let resp = s.signed("GET", "/metrics", &[], Vec::new()).await;
    expect_raw_error(resp, 404, "NoSuchBucket").await;

    // Neither a token nor the public choice: closed to all, saying how to open it.
    s.set_env("QUARRY_METRICS_TOKEN", "");
    s.restart().await;
    let body = expect_raw_error(metrics_get(&url).await, 403, "AccessDenied").await;
    assert!(body.contains("--metrics-public"), "{body}");
    // Public, by choice: anonymous scrapes work.
    s.set_env("QUARRY_METRICS_PUBLIC", "true");
    s.restart().await;
    let resp = client.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("quarry_drives"));
}
