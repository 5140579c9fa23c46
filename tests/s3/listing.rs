//! ListObjectsV2 and ListObjects (v1): prefix, delimiter, pagination, start-after, marker and
//! encoding-type=url, each compared with a reference listing computed here from the key set.

use std::collections::BTreeSet;

use quarry_integration::aws_sdk_s3::types::EncodingType;
use quarry_integration::aws_sdk_s3::Client;
use quarry_integration::*;

/// One listing entry in S3 order: a key, or a common prefix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Entry {
    Key(String),
    Prefix(String),
}

impl Entry {
    fn name(&self) -> &str {
        match self {
            Entry::Key(k) | Entry::Prefix(k) => k,
        }
    }
}

/// What S3 returns for these parameters over all pages, in order.
fn reference(
    keys: &BTreeSet<String>,
    prefix: &str,
    delimiter: Option<&str>,
    start_after: Option<&str>,
) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut prefixes = BTreeSet::new();
    // Start-after (and a v1 marker) applies to entries: a key or a common prefix is listed only if
    // it sorts after it. So a marker that is a common prefix skips everything under it, and a
    // common prefix that sorts before start-after is not listed even if keys under it sort after.
    let after = |name: &str| start_after.is_none_or(|sa| name > sa);
    for k in keys {
        if !k.starts_with(prefix) {
            continue;
        }
        if let Some(d) = delimiter {
            if let Some(i) = k[prefix.len()..].find(d) {
                let cp = k[..prefix.len() + i + d.len()].to_string();
                if after(&cp) && prefixes.insert(cp.clone()) {
                    out.push(Entry::Prefix(cp));
                }
                continue;
            }
        }
        if after(k) {
            out.push(Entry::Key(k.clone()));
        }
    }
    out
}

/// Keys and common prefixes of one page, merged into S3 order.
fn page_entries(keys: Vec<String>, prefixes: Vec<String>) -> Vec<Entry> {
    let mut v: Vec<Entry> = keys
        .into_iter()
        .map(Entry::Key)
        .chain(prefixes.into_iter().map(Entry::Prefix))
        .collect();
    v.sort_by(|a, b| a.name().cmp(b.name()));
    v
}

const TREE: &[&str] = &[
    "a.txt",
    "b/1",
    "b/2",
    "b/c/1",
    "b/c/2",
    "b/c/d/1",
    "b/c/d/2",
    "b/e",
    "c/",
    "c/x",
    "c/y/z",
    "d e/f g",
    "d e/h",
    "e+f/1",
    "e+f/2",
    "x%y/z",
    "ü/日本",
    "ü/a",
    "z",
    "zz/top",
    "photos/2024/jan/1.jpg",
    "photos/2024/jan/2.jpg",
    "photos/2024/feb/1.jpg",
    "photos/2025/mar/1.jpg",
    "photos/readme",
    "q&a<b>",
    "b-sibling",
    "b.dot/1",
];

async fn setup_tree(s: &TestServer) -> BTreeSet<String> {
    s.create_bucket("tree").await;
    let mut set = tokio::task::JoinSet::new();
    let shared = s.client();
    for k in TREE {
        let c = shared.clone();
        let k = k.to_string();
        set.spawn(async move {
            put_bytes(&c, "tree", &k, k.as_bytes()).await;
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("put task");
    }
    TREE.iter().map(|k| k.to_string()).collect()
}

/// ListObjectsV2 with max-keys, following continuation tokens by hand.
async fn list_v2_paged(
    c: &Client,
    prefix: &str,
    delimiter: Option<&str>,
    start_after: Option<&str>,
    max_keys: i32,
) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    for page_no in 0.. {
        assert!(page_no < 100, "pagination does not end");
        let mut req = c
            .list_objects_v2()
            .bucket("tree")
            .prefix(prefix)
            .max_keys(max_keys);
        if let Some(d) = delimiter {
            req = req.delimiter(d);
        }
        if let Some(sa) = start_after {
            req = req.start_after(sa);
        }
        if let Some(t) = &token {
            req = req.continuation_token(t);
        }
        let page = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("list page {page_no}: {}", describe(&e)));
        let keys: Vec<String> = page
            .contents()
            .iter()
            .map(|o| o.key().unwrap_or_default().to_string())
            .collect();
        let prefixes: Vec<String> = page
            .common_prefixes()
            .iter()
            .map(|p| p.prefix().unwrap_or_default().to_string())
            .collect();
        let n = keys.len() + prefixes.len();
        assert!(
            n <= max_keys as usize,
            "page {page_no} has {n} entries > max-keys {max_keys}"
        );
        assert_eq!(
            page.key_count(),
            Some(n as i32),
            "KeyCount counts keys and prefixes"
        );
        out.extend(page_entries(keys, prefixes));
        if page.is_truncated() == Some(true) {
            assert!(n > 0, "a truncated page is not empty");
            token = Some(
                page.next_continuation_token()
                    .expect("truncated page has NextContinuationToken")
                    .to_string(),
            );
        } else {
            assert!(
                page.next_continuation_token().is_none(),
                "last page has no token"
            );
            break;
        }
    }
    out
}

/// ListObjects (v1) with max-keys, following NextMarker (or the last key without a delimiter).
async fn list_v1_paged(
    c: &Client,
    prefix: &str,
    delimiter: Option<&str>,
    max_keys: i32,
) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut marker: Option<String> = None;
    for page_no in 0.. {
        assert!(page_no < 100, "v1 pagination does not end");
        let mut req = c
            .list_objects()
            .bucket("tree")
            .prefix(prefix)
            .max_keys(max_keys);
        if let Some(d) = delimiter {
            req = req.delimiter(d);
        }
        if let Some(m) = &marker {
            req = req.marker(m);
        }
        let page = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("v1 page {page_no}: {}", describe(&e)));
        let keys: Vec<String> = page
            .contents()
            .iter()
            .map(|o| o.key().unwrap_or_default().to_string())
            .collect();
        let prefixes: Vec<String> = page
            .common_prefixes()
            .iter()
            .map(|p| p.prefix().unwrap_or_default().to_string())
            .collect();
        assert!(keys.len() + prefixes.len() <= max_keys as usize);
        let entries = page_entries(keys, prefixes);
        let last = entries.last().map(|e| e.name().to_string());
        out.extend(entries);
        if page.is_truncated() == Some(true) {
            marker = match (page.next_marker(), delimiter) {
                (Some(m), _) => Some(m.to_string()),
                (None, None) => last,
                (None, Some(_)) => {
                    panic!("truncated v1 page with a delimiter must carry NextMarker")
                }
            };
            assert!(
                marker.is_some(),
                "truncated v1 page with no way to continue"
            );
        } else {
            break;
        }
    }
    out
}

const CASES: &[(&str, Option<&str>)] = &[
    ("", None),
    ("", Some("/")),
    ("b/", Some("/")),
    ("b/", None),
    ("b", Some("/")),
    ("b/c", Some("/")),
    ("photos/", Some("/")),
    ("photos/2024/", None),
    ("d e/", Some("/")),
    ("ü/", Some("/")),
    ("nomatch", None),
    ("", Some("c")),
];

#[tokio::test]
async fn list_v2_matches_reference() {
    let s = TestServer::start(4).await;
    let c = s.client();
    let keys = setup_tree(&s).await;
    assert!(keys.len() >= 25);

    // Full listing carries sizes and ETags.
    let all = c
        .list_objects_v2()
        .bucket("tree")
        .send()
        .await
        .expect("list all");
    assert_eq!(all.is_truncated(), Some(false));
    assert_eq!(all.key_count(), Some(keys.len() as i32));
    for o in all.contents() {
        let k = o.key().expect("key");
        assert_eq!(o.size(), Some(k.len() as i64), "size of {k}");
        assert_eq!(
            o.e_tag(),
            Some(etag_of(k.as_bytes()).as_str()),
            "etag of {k}"
        );
        assert!(o.last_modified().is_some(), "LastModified of {k}");
    }

    for &(prefix, delim) in CASES {
        let want = reference(&keys, prefix, delim, None);
        let one = list_v2_paged(&c, prefix, delim, None, 1000).await;
        assert_eq!(one, want, "one page: prefix {prefix:?} delimiter {delim:?}");
        let paged = list_v2_paged(&c, prefix, delim, None, 3).await;
        assert_eq!(
            paged, want,
            "max-keys 3: prefix {prefix:?} delimiter {delim:?}"
        );
    }
}

#[tokio::test]
async fn list_v2_sdk_paginator_and_start_after() {
    let s = TestServer::start(4).await;
    let c = s.client();
    let keys = setup_tree(&s).await;

    for &(prefix, delim) in &[("", None), ("", Some("/")), ("b/", Some("/"))] {
        let mut req = c
            .list_objects_v2()
            .bucket("tree")
            .prefix(prefix)
            .max_keys(3);
        if let Some(d) = delim {
            req = req.delimiter(d);
        }
        let mut stream = req.into_paginator().send();
        let mut got = Vec::new();
        let mut pages = 0;
        while let Some(page) = stream.next().await {
            let page = page.unwrap_or_else(|e| panic!("paginator: {}", describe(&e)));
            pages += 1;
            let keys: Vec<String> = page
                .contents()
                .iter()
                .map(|o| o.key().unwrap_or_default().to_string())
                .collect();
            let prefixes: Vec<String> = page
                .common_prefixes()
                .iter()
                .map(|p| p.prefix().unwrap_or_default().to_string())
                .collect();
            got.extend(page_entries(keys, prefixes));
        }
        let want = reference(&keys, prefix, delim, None);
        assert_eq!(
            got, want,
            "paginator: prefix {prefix:?} delimiter {delim:?}"
        );
        assert_eq!(
            pages,
            want.len().div_ceil(3).max(1),
            "page count for {} entries",
            want.len()
        );
    }

    for (prefix, delim, sa) in [
        ("", None, "b/c/1"),
        ("", Some("/"), "b/c/1"),
        ("b/", Some("/"), "b/c/1"),
        ("", None, "a"),
        ("", None, "zz/top"),
        ("", None, "~"),
        ("photos/", None, "photos/2024/jan"),
    ] {
        let want = reference(&keys, prefix, delim, Some(sa));
        assert_eq!(
            list_v2_paged(&c, prefix, delim, Some(sa), 1000).await,
            want,
            "start-after {sa:?} prefix {prefix:?} delimiter {delim:?}"
        );
        assert_eq!(
            list_v2_paged(&c, prefix, delim, Some(sa), 3).await,
            want,
            "paged start-after {sa:?} prefix {prefix:?} delimiter {delim:?}"
        );
    }

    let err = c
        .list_objects_v2()
        .bucket("tree")
        .continuation_token("this-is-not-a-token")
        .send()
        .await;
    assert_s3_error(err, 400, "InvalidArgument");
}

#[tokio::test]
async fn list_v1_with_marker_matches_reference() {
    let s = TestServer::start(4).await;
    let c = s.client();
    let keys = setup_tree(&s).await;
    for &(prefix, delim) in CASES {
        let want = reference(&keys, prefix, delim, None);
        assert_eq!(
            list_v1_paged(&c, prefix, delim, 1000).await,
            want,
            "v1 prefix {prefix:?} delimiter {delim:?}"
        );
        assert_eq!(
            list_v1_paged(&c, prefix, delim, 3).await,
            want,
            "v1 max-keys 3 prefix {prefix:?} delimiter {delim:?}"
        );
    }
    // An explicit marker: everything after it.
    let out = c
        .list_objects()
        .bucket("tree")
        .marker("photos/")
        .send()
        .await
        .expect("v1 marker");
    let got: Vec<String> = out
        .contents()
        .iter()
        .map(|o| o.key().unwrap_or_default().to_string())
        .collect();
    let want: Vec<String> = keys
        .iter()
        .filter(|k| k.as_str() > "photos/")
        .cloned()
        .collect();
    assert_eq!(got, want, "marker photos/");
}

fn url_decode(s: &str) -> String {
    let plus = s.replace('+', " ");
    percent_encoding::percent_decode_str(&plus)
        .decode_utf8()
        .unwrap_or_else(|e| panic!("{s:?} is not valid percent-encoded UTF-8: {e}"))
        .into_owned()
}

#[tokio::test]
async fn list_encoding_type_url() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("enc").await;
    let keys: BTreeSet<String> = [
        "a b",
        "a+b",
        "a%b",
        "amp&x",
        "lt<gt>",
        "ü/x",
        "ctrl\u{1}char",
        "sp ace/dir/k",
        "tab\tkey",
        "plain",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    for k in &keys {
        put_bytes(&c, "enc", k, b"v").await;
    }
    for delim in [None, Some("/")] {
        let mut got = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut req = c
                .list_objects_v2()
                .bucket("enc")
                .encoding_type(EncodingType::Url)
                .max_keys(4);
            if let Some(d) = delim {
                req = req.delimiter(d);
            }
            if let Some(t) = &token {
                req = req.continuation_token(t);
            }
            let page = req
                .send()
                .await
                .unwrap_or_else(|e| panic!("list encoded: {}", describe(&e)));
            assert_eq!(
                page.encoding_type().map(|e| e.as_str()),
                Some("url"),
                "EncodingType echoed"
            );
            let raw: Vec<String> = page
                .contents()
                .iter()
                .map(|o| o.key().unwrap_or_default().to_string())
                .chain(
                    page.common_prefixes()
                        .iter()
                        .map(|p| p.prefix().unwrap_or_default().to_string()),
                )
                .collect();
            for r in &raw {
                assert!(
                    !r.contains(' ')
                        && !r.contains('\u{1}')
                        && !r.contains('\t')
                        && !r.contains('<')
                        && !r.contains('&'),
                    "key not URL-encoded: {r:?}"
                );
            }
            let keys_dec = page
                .contents()
                .iter()
                .map(|o| url_decode(o.key().unwrap_or_default()))
                .collect();
            let pre_dec = page
                .common_prefixes()
                .iter()
                .map(|p| url_decode(p.prefix().unwrap_or_default()))
                .collect();
            got.extend(page_entries(keys_dec, pre_dec));
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_string()),
                _ => break,
            }
        }
        assert_eq!(
            got,
            reference(&keys, "", delim, None),
            "encoding-type=url, delimiter {delim:?}"
        );
    }
    // v1 too.
    let out = c
        .list_objects()
        .bucket("enc")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .expect("v1 encoded");
    let got: BTreeSet<String> = out
        .contents()
        .iter()
        .map(|o| url_decode(o.key().unwrap_or_default()))
        .collect();
    assert_eq!(got, keys, "v1 encoding-type=url");
}

#[tokio::test]
async fn max_keys_is_capped_at_1000() {
    // One drive: the listing logic is the same, and 1003 PUTs cost a quarter of the writes.
    let s = TestServer::start(1).await;
    s.create_bucket("many").await;
    let n = 1003;
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
    let mut set = tokio::task::JoinSet::new();
    let shared = s.client();
    for i in 0..n {
        let c = shared.clone();
        let sem = sem.clone();
        set.spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore");
            put_bytes(&c, "many", &format!("k{i:05}"), b"").await;
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("put task");
    }
    let c = s.client();
    for max in [None, Some(1000), Some(5000)] {
        let mut req = c.list_objects_v2().bucket("many");
        if let Some(m) = max {
            req = req.max_keys(m);
        }
        let t = std::time::Instant::now();
        let page = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("list: {}", describe(&e)));
        eprintln!(
            "ListObjectsV2 of 1000 keys (max-keys {max:?}) took {:?}",
            t.elapsed()
        );
        assert_eq!(
            page.contents().len(),
            1000,
            "max-keys {max:?} returns at most 1000"
        );
        assert_eq!(page.is_truncated(), Some(true));
        let rest = c
            .list_objects_v2()
            .bucket("many")
            .continuation_token(page.next_continuation_token().expect("token"))
            .send()
            .await
            .expect("second page");
        let keys: Vec<_> = rest
            .contents()
            .iter()
            .map(|o| o.key().unwrap_or_default())
            .collect();
        assert_eq!(keys, ["k01000", "k01001", "k01002"]);
        assert_eq!(rest.is_truncated(), Some(false));
    }
    let v1 = c
        .list_objects()
        .bucket("many")
        .max_keys(5000)
        .send()
        .await
        .expect("v1");
    assert_eq!(v1.contents().len(), 1000, "v1 max-keys is capped too");
    assert_eq!(v1.is_truncated(), Some(true));
}

/// The fields S3 encodes with `encoding-type=url`, and how: a space as `%20` (a `+` would be
/// read back as a `+` in the key), the v1 `Prefix` as sent; an empty continuation token echoed.
#[tokio::test]
async fn url_encoding_of_each_field_and_empty_tokens() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("encf").await;
    for k in [
        "foo+1/bar",
        "foo/bar/xyzzy",
        "quux ab/thud",
        "asdf+b",
        "\nline",
    ] {
        put_bytes(&c, "encf", k, b"v").await;
    }
    let v2 = c
        .list_objects_v2()
        .bucket("encf")
        .delimiter("/")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .expect("v2");
    let keys: Vec<&str> = v2.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["%0Aline", "asdf%2Bb"]);
    let prefixes: Vec<&str> = v2
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(prefixes, ["foo%2B1/", "foo/", "quux%20ab/"]);
    assert_eq!(v2.delimiter(), Some("/"));

    // v1: keys encoded, the Prefix element as sent.
    let v1 = c
        .list_objects()
        .bucket("encf")
        .prefix("\n")
        .encoding_type(EncodingType::Url)
        .send()
        .await
        .expect("v1");
    assert_eq!(v1.prefix(), Some("\n"));
    let keys: Vec<&str> = v1.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["%0Aline"]);

    // An empty continuation token lists from the start and is echoed.
    let raw = s
        .signed(
            "GET",
            "/encf?list-type=2&continuation-token=",
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(raw.status().as_u16(), 200);
    let body = raw.text().await.expect("body");
    assert!(
        body.contains("<ContinuationToken></ContinuationToken>"),
        "{body}"
    );
    assert!(body.contains("<KeyCount>5</KeyCount>"), "{body}");
    // A token that is not one of ours is still refused.
    let raw = s
        .signed(
            "GET",
            "/encf?list-type=2&continuation-token=%21%21",
            &[],
            Vec::new(),
        )
        .await;
    expect_raw_error(raw, 400, "InvalidArgument").await;
}
