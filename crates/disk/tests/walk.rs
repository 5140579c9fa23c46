//! LocalDrive::walk against a reference: sort the keys, filter, collapse, take.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{drive, put_data, put_inline};
use proptest::prelude::*;
use quarry_disk::{path::validate_key, Drive, LocalDrive, WalkEntry, WalkOptions};

/// What a walk must return: (is_prefix, name).
fn reference(keys: &BTreeSet<String>, o: &WalkOptions) -> Vec<(bool, String)> {
    let mut out: BTreeMap<String, bool> = BTreeMap::new();
    for k in keys.iter().filter(|k| k.starts_with(&o.prefix)) {
        let rest = &k[o.prefix.len()..];
        let (name, is_prefix) = match rest.find('/') {
            Some(i) if o.delimited => (format!("{}{}", o.prefix, &rest[..=i]), true),
            _ => (k.clone(), false),
        };
        if o.marker.as_ref().is_none_or(|m| name > *m) {
            out.insert(name, is_prefix);
        }
    }
    out.into_iter().take(o.limit).map(|(n, p)| (p, n)).collect()
}

async fn walk(d: &LocalDrive, o: &WalkOptions) -> Vec<(bool, String)> {
    d.walk("b", o)
        .await
        .unwrap()
        .into_iter()
        .map(|e| match e {
            WalkEntry::Object { key, meta } => {
                assert_eq!(meta.etag, key, "metadata of the wrong object");
                (false, key)
            }
            WalkEntry::Prefix(p) => (true, p),
        })
        .collect()
}

/// Prefixes and markers worth trying for a key set: every prefix of every key, plus a few that
/// match nothing.
fn probes(keys: &BTreeSet<String>) -> Vec<String> {
    let mut set: BTreeSet<String> = ["", "a", "a/", "a-", "b", "zz", "/", "a//", "0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for k in keys {
        for (i, _) in k.char_indices() {
            set.insert(k[..i].to_string());
        }
        set.insert(k.clone());
        set.insert(format!("{k}0"));
    }
    set.into_iter().collect()
}

async fn check_all(d: &LocalDrive, keys: &BTreeSet<String>) {
    let probes = probes(keys);
    let mut markers: Vec<Option<String>> = vec![None];
    markers.extend(probes.iter().cloned().map(Some));
    for prefix in &probes {
        for marker in &markers {
            for delimited in [false, true] {
                for limit in [1, 2, 3, 1000] {
                    let o = WalkOptions {
                        prefix: prefix.clone(),
                        marker: marker.clone(),
                        delimited,
                        limit,
                    };
                    assert_eq!(
                        walk(d, &o).await,
                        reference(keys, &o),
                        "{o:?} over {keys:?}"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn ordering_table() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let keys: BTreeSet<String> = ["a", "a-c", "a/b", "a/", "b", "a/b/c", "a/b-", "b/"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for k in &keys {
        // Objects with data dirs, so the walk must skip those too.
        put_data(&d, "b", k, b"x").await;
    }
    let all = WalkOptions {
        limit: 100,
        ..Default::default()
    };
    let names: Vec<String> = walk(&d, &all).await.into_iter().map(|e| e.1).collect();
    assert_eq!(names, ["a", "a-c", "a/", "a/b", "a/b-", "a/b/c", "b", "b/"]);
    let delimited = WalkOptions {
        delimited: true,
        ..all.clone()
    };
    assert_eq!(
        walk(&d, &delimited).await,
        [
            (false, "a".to_string()),
            (false, "a-c".to_string()),
            (true, "a/".to_string()),
            (false, "b".to_string()),
            (true, "b/".to_string()),
        ]
    );
    let in_a = WalkOptions {
        prefix: "a/".into(),
        ..delimited.clone()
    };
    assert_eq!(
        walk(&d, &in_a).await,
        [
            (false, "a/".to_string()),
            (false, "a/b".to_string()),
            (false, "a/b-".to_string()),
            (true, "a/b/".to_string()),
        ]
    );
    // A common prefix as the marker skips everything under it.
    let after = WalkOptions {
        marker: Some("a/".into()),
        ..delimited.clone()
    };
    assert_eq!(
        walk(&d, &after).await,
        [(false, "b".to_string()), (true, "b/".to_string())]
    );
    check_all(&d, &keys).await;
}

#[tokio::test]
async fn stray_directories_are_not_objects_or_prefixes() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    put_inline(&d, "b", "k").await;
    put_inline(&d, "b", "s/real").await;
    // Empty directories (a crash between mkdir and commit), a stray data dir, a temp file.
    for p in ["b/empty/deeper", "b/s/empty", "b/k/not-a-data-dir/x"] {
        std::fs::create_dir_all(d.root().join(p)).unwrap();
    }
    std::fs::write(d.root().join("b/s/empty/.quarry.tmp.9"), b"x").unwrap();
    std::fs::write(d.root().join("b/k/not-a-data-dir/x/part.1"), b"x").unwrap();
    let keys: BTreeSet<String> = ["k", "s/real"].iter().map(|s| s.to_string()).collect();
    check_all(&d, &keys).await;
}

#[tokio::test]
async fn folder_markers_and_unicode() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let keys: BTreeSet<String> = [
        "x/", "x/y/", "x/y/z", "x", "x.y", "é", "e/é/", "e", "x/y", "x/ y", "x/\u{7f}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for k in &keys {
        put_inline(&d, "b", k).await;
    }
    check_all(&d, &keys).await;
}

fn key_strategy() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[ab/-]{1,6}")
        .unwrap()
        .prop_filter("valid key", |k| validate_key(k).is_ok())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn walk_matches_reference(
        keys in proptest::collection::btree_set(key_strategy(), 0..12),
        queries in proptest::collection::vec(
            (any::<prop::sample::Index>(), any::<Option<prop::sample::Index>>(), any::<bool>(), 1usize..5),
            100,
        ),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (_t, d) = drive().await;
            d.make_volume("b").await.unwrap();
            for (i, k) in keys.iter().enumerate() {
                if i % 2 == 0 {
                    put_inline(&d, "b", k).await;
                } else {
                    put_data(&d, "b", k, b"x").await;
                }
            }
            let probes = probes(&keys);
            for (p, m, delimited, limit) in queries {
                let o = WalkOptions {
                    prefix: p.get(&probes).clone(),
                    marker: m.map(|m| m.get(&probes).clone()),
                    delimited,
                    limit: if limit == 4 { 1000 } else { limit },
                };
                assert_eq!(walk(&d, &o).await, reference(&keys, &o), "{o:?} over {keys:?}");
            }
        });
    }
}
