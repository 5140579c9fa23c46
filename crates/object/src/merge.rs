//! Merging the listing pages of several erasure sets into one page, as a cluster lists.
//!
//! A page of ListObjects ([`list_across`]) asks each set for its share of the page (keys spread
//! evenly over the sets by hash) and more only from a set that limits it: every entry up to
//! the smallest frontier (the last entry of a set that has more) is known, so the page is
//! complete once more than `max` entries are known up to it, or every set is exhausted. Asking
//! every set for a whole page made each page of a cluster of n sets cost n pages of listing.
//!
//! [`merge_list_pages`] and [`merge_upload_pages`] merge whole pages: the first `max` entries in
//! S3 order. A set whose page is truncated returned `max` entries up to its last one, so every
//! entry kept is at or before any truncated set's last entry: nothing is skipped, and the next
//! page starts after the last entry kept.

use std::future::Future;

use futures::future::join_all;

use crate::api::{ListOptions, ListResult, ObjectInfo};
use crate::api::{ListUploadsResult, UploadInfo};
use crate::error::Result;

/// One entry of a listing page: an object or a common prefix, ordered by name.
enum Listed {
    Object(ObjectInfo),
    Prefix(String),
}

impl Listed {
    fn name(&self) -> &str {
        match self {
            Listed::Object(o) => &o.key,
            Listed::Prefix(p) => p,
        }
    }
}

/// What is known of one set's listing: the entries it returned, and where to go on (after
/// its last entry) while it has more.
struct Cursor {
    entries: Vec<Listed>,
    more: Option<String>,
}

impl Cursor {
    /// Takes a page the set returned after `after`. `false` when a truncated page made no
    /// progress (no entry after `after` to go on from).
    fn take(&mut self, page: ListResult, after: Option<&str>) -> bool {
        let last = page.next_marker.clone().or_else(|| {
            let o = page.objects.last().map(|o| o.key.clone());
            let p = page.common_prefixes.last().cloned();
            o.max(p)
        });
        let truncated = page.is_truncated;
        self.entries
            .extend(page.objects.into_iter().map(Listed::Object));
        self.entries
            .extend(page.common_prefixes.into_iter().map(Listed::Prefix));
        self.more = None;
        if truncated {
            match last.filter(|l| after.is_none_or(|a| l.as_bytes() > a.as_bytes())) {
                Some(l) => self.more = Some(l),
                None => return false,
            }
        }
        true
    }
}

/// The smallest frontier of the sets that have more: every entry at or before it is known.
fn frontier(cursors: &[Cursor]) -> Option<&str> {
    cursors
        .iter()
        .filter_map(|c| c.more.as_deref())
        .min_by(|a, b| a.as_bytes().cmp(b.as_bytes()))
}

/// The distinct names known at or before `bound` (all when `None`).
fn known(cursors: &[Cursor], bound: Option<&str>) -> usize {
    let mut names: Vec<&str> = cursors
        .iter()
        .flat_map(|c| c.entries.iter().map(Listed::name))
        .filter(|n| bound.is_none_or(|b| n.as_bytes() <= b.as_bytes()))
        .collect();
    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    names.dedup();
    names.len()
}

/// One ListObjects page over `sets` erasure sets, `fetch(i, opts)` listing set `i` (see the
/// module doc). The page is the one a merge of every set's whole page gives.
pub(crate) async fn list_across<F, Fut>(
    sets: usize,
    opts: &ListOptions,
    fetch: F,
) -> Result<ListResult>
where
    F: Fn(usize, ListOptions) -> Fut,
    Fut: Future<Output = Result<ListResult>>,
{
    let max_keys = opts.max_keys;
    let whole = || async {
        let pages = join_all((0..sets).map(|i| fetch(i, opts.clone())))
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        Ok(merge_list_pages(pages, max_keys))
    };
    if sets <= 1 || max_keys == 0 {
        return whole().await;
    }
    let share = (max_keys / sets + (max_keys / sets / 4).max(8)).min(max_keys);
    let ask = |i: usize, marker: Option<String>, n: usize| {
        let mut o = opts.clone();
        o.marker = marker;
        o.max_keys = n;
        fetch(i, o)
    };
    let mut cursors: Vec<Cursor> = (0..sets)
        .map(|_| Cursor {
            entries: Vec::new(),
            more: None,
        })
        .collect();
    let first = join_all((0..sets).map(|i| ask(i, opts.marker.clone(), share))).await;
    for (c, page) in cursors.iter_mut().zip(first) {
        if !c.take(page?, opts.marker.as_deref()) {
            return whole().await;
        }
    }
    loop {
        let bound = frontier(&cursors).map(str::to_owned);
        let have = known(&cursors, bound.as_deref());
        let Some(bound) = bound.filter(|_| have <= max_keys) else {
            break;
        };
        // The sets at the frontier hold the page back: ask them for what is missing at least.
        let n = (max_keys + 1 - have).max(share).min(max_keys);
        let behind: Vec<usize> = (0..sets)
            .filter(|&i| cursors[i].more.as_deref() == Some(bound.as_str()))
            .collect();
        let pages = join_all(behind.iter().map(|&i| ask(i, Some(bound.clone()), n))).await;
        for (i, page) in behind.into_iter().zip(pages) {
            if !cursors[i].take(page?, Some(&bound)) {
                return whole().await;
            }
        }
    }
    let bound = frontier(&cursors).map(str::to_owned);
    let mut all: Vec<Listed> = cursors
        .into_iter()
        .flat_map(|c| c.entries)
        .filter(|e| {
            bound
                .as_deref()
                .is_none_or(|b| e.name().as_bytes() <= b.as_bytes())
        })
        .collect();
    all.sort_by(|a, b| a.name().as_bytes().cmp(b.name().as_bytes()));
    all.dedup_by(|b, a| matches!((&*a, &*b), (Listed::Prefix(x), Listed::Prefix(y)) if x == y));
    // More lies beyond a frontier, or beyond the page.
    let truncated = bound.is_some() || all.len() > max_keys;
    all.truncate(max_keys);
    Ok(page_of(all, truncated))
}

/// The result holding `all` (at most a page, in order).
fn page_of(all: Vec<Listed>, truncated: bool) -> ListResult {
    let mut out = ListResult {
        is_truncated: truncated,
        next_marker: if truncated {
            all.last().map(|e| e.name().to_string())
        } else {
            None
        },
        ..Default::default()
    };
    for e in all {
        match e {
            Listed::Object(o) => out.objects.push(o),
            Listed::Prefix(p) => out.common_prefixes.push(p),
        }
    }
    out
}

/// Merges the pages several sets returned for one ListObjects request.
pub(crate) fn merge_list_pages(pages: Vec<ListResult>, max_keys: usize) -> ListResult {
    let any_truncated = pages.iter().any(|p| p.is_truncated);
    let mut all: Vec<Listed> = Vec::new();
    for p in pages {
        all.extend(p.objects.into_iter().map(Listed::Object));
        all.extend(p.common_prefixes.into_iter().map(Listed::Prefix));
    }
    // Byte order of the names, as S3 lists.
    all.sort_by(|a, b| a.name().as_bytes().cmp(b.name().as_bytes()));
    // A common prefix appears once even when several sets hold keys under it.
    all.dedup_by(|b, a| matches!((&*a, &*b), (Listed::Prefix(x), Listed::Prefix(y)) if x == y));
    let truncated = any_truncated || all.len() > max_keys;
    all.truncate(max_keys);
    page_of(all, truncated)
}

enum Upload {
    Upload(UploadInfo),
    Prefix(String),
}

fn upload_order(e: &Upload) -> (&[u8], i64, &str) {
    match e {
        Upload::Upload(u) => (u.key.as_bytes(), u.initiated_ns, &u.upload_id),
        Upload::Prefix(p) => (p.as_bytes(), i64::MIN, ""),
    }
}

/// Merges the ListMultipartUploads pages of several sets (the uploads of one key live in the
/// key's set, so no upload appears twice).
pub(crate) fn merge_upload_pages(pages: Vec<ListUploadsResult>, max: usize) -> ListUploadsResult {
    let any_truncated = pages.iter().any(|p| p.is_truncated);
    let mut all: Vec<Upload> = Vec::new();
    for p in pages {
        all.extend(p.uploads.into_iter().map(Upload::Upload));
        all.extend(p.common_prefixes.into_iter().map(Upload::Prefix));
    }
    all.sort_by(|a, b| upload_order(a).cmp(&upload_order(b)));
    all.dedup_by(|b, a| matches!((&*a, &*b), (Upload::Prefix(x), Upload::Prefix(y)) if x == y));
    let truncated = any_truncated || all.len() > max;
    all.truncate(max);
    let mut out = ListUploadsResult {
        is_truncated: truncated,
        ..Default::default()
    };
    if truncated {
        match all.last() {
            Some(Upload::Upload(u)) => {
                out.next_key_marker = Some(u.key.clone());
                out.next_upload_id_marker = Some(u.upload_id.clone());
            }
            Some(Upload::Prefix(p)) => out.next_key_marker = Some(p.clone()),
            None => {}
        }
    }
    for e in all {
        match e {
            Upload::Upload(u) => out.uploads.push(u),
            Upload::Prefix(p) => out.common_prefixes.push(p),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(k: &str) -> ObjectInfo {
        ObjectInfo {
            key: k.into(),
            ..Default::default()
        }
    }

    fn page(objs: &[&str], prefixes: &[&str], truncated: bool) -> ListResult {
        ListResult {
            objects: objs.iter().map(|k| obj(k)).collect(),
            common_prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
            is_truncated: truncated,
            next_marker: None,
        }
    }

    fn names(r: &ListResult) -> Vec<String> {
        let mut v: Vec<String> = r.objects.iter().map(|o| o.key.clone()).collect();
        v.extend(r.common_prefixes.iter().cloned());
        v.sort();
        v
    }

    #[test]
    fn merges_in_order_and_dedups_prefixes() {
        let r = merge_list_pages(
            vec![
                page(&["a", "d"], &["p/"], false),
                page(&["b", "c"], &["p/", "q/"], false),
            ],
            10,
        );
        assert_eq!(names(&r), vec!["a", "b", "c", "d", "p/", "q/"]);
        assert!(!r.is_truncated && r.next_marker.is_none());
    }

    #[test]
    fn truncation_keeps_the_first_entries_and_the_marker() {
        // Set 1 is truncated after "c" (2 entries, max 2); set 2 has "b" and "z".
        let r = merge_list_pages(
            vec![page(&["a", "c"], &[], true), page(&["b", "z"], &[], false)],
            2,
        );
        assert_eq!(names(&r), vec!["a", "b"]);
        assert!(r.is_truncated);
        assert_eq!(r.next_marker.as_deref(), Some("b"));
        // Nothing truncated, but more than max together.
        let r = merge_list_pages(vec![page(&["a"], &[], false), page(&["b"], &[], false)], 1);
        assert_eq!(names(&r), vec!["a"]);
        assert_eq!(r.next_marker.as_deref(), Some("a"));
        // A page of 0.
        let r = merge_list_pages(vec![page(&["a"], &[], false)], 0);
        assert!(r.objects.is_empty());
    }

    /// A set as `list_across` sees it: its names (objects, and `/`-ended common prefixes that
    /// several sets may share), listed after a marker a page at a time.
    fn fake_set(names: &[String], opts: &ListOptions) -> ListResult {
        let after: Vec<&String> = names
            .iter()
            .filter(|n| opts.marker.as_deref().is_none_or(|m| n.as_str() > m))
            .collect();
        let page = &after[..after.len().min(opts.max_keys)];
        let truncated = after.len() > page.len();
        ListResult {
            objects: page
                .iter()
                .filter(|n| !n.ends_with('/'))
                .map(|n| obj(n))
                .collect(),
            common_prefixes: page
                .iter()
                .filter(|n| n.ends_with('/'))
                .map(|n| n.to_string())
                .collect(),
            is_truncated: truncated,
            next_marker: truncated
                .then(|| page.last().map(|n| n.to_string()))
                .flatten(),
        }
    }

    fn in_order(r: &ListResult) -> Vec<String> {
        let mut v = names(r);
        v.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        v
    }

    proptest::proptest! {
        /// Every page, and the walk of pages, is what merging every set's whole page gives.
        #[test]
        fn a_page_across_sets_is_the_merge_of_whole_pages(
            keys in proptest::collection::btree_set("[a-f]{1,4}", 0..800),
            prefixes in proptest::collection::btree_set("[a-e]{1,2}/", 0..20),
            sets in 1usize..6,
            max_keys in 0usize..200,
            seed in 0u64..1000,
        ) {
            // Keys go to one set each, unevenly: half of them to set 0, and a whole range of
            // names to the last set; a common prefix shows in any number of sets.
            let mut held: Vec<Vec<String>> = vec![Vec::new(); sets];
            for k in &keys {
                let h = k.bytes().fold(seed, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
                let mut set = (h % (2 * sets as u64)) as usize;
                if set >= sets {
                    set = 0;
                }
                if k.starts_with('b') {
                    set = sets - 1;
                }
                held[set].push(k.clone());
            }
            for (i, p) in prefixes.iter().enumerate() {
                for (s, h) in held.iter_mut().enumerate() {
                    if !(i + s + seed as usize).is_multiple_of(3) {
                        h.push(p.clone());
                    }
                }
            }
            for h in held.iter_mut() {
                h.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
                h.dedup();
            }
            let mut marker: Option<String> = None;
            let mut walked = Vec::new();
            for _ in 0..400 {
                let opts = ListOptions { marker: marker.clone(), max_keys, ..Default::default() };
                let got = futures::executor::block_on(list_across(sets, &opts, |i, o| {
                    let r = fake_set(&held[i], &o);
                    async move { Ok(r) }
                }))
                .unwrap();
                let whole = merge_list_pages(held.iter().map(|h| fake_set(h, &opts)).collect(), max_keys);
                proptest::prop_assert_eq!(in_order(&got), in_order(&whole));
                proptest::prop_assert_eq!(got.is_truncated, whole.is_truncated);
                proptest::prop_assert_eq!(&got.next_marker, &whole.next_marker);
                walked.extend(in_order(&got));
                if !got.is_truncated || max_keys == 0 {
                    break;
                }
                marker = got.next_marker.clone();
            }
            if max_keys > 0 {
                let mut all: Vec<String> = held.concat();
                all.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
                all.dedup();
                proptest::prop_assert_eq!(walked, all);
            }
        }
    }

    /// Keys spread evenly over the sets: each set is asked for about its share of the page.
    #[test]
    fn sets_are_asked_for_their_share() {
        let held: Vec<Vec<String>> = (0..4)
            .map(|s| {
                (0..2000)
                    .filter(|i| i % 4 == s)
                    .map(|i| format!("k{i:05}"))
                    .collect()
            })
            .collect();
        let opts = ListOptions {
            max_keys: 1000,
            ..Default::default()
        };
        let asked = std::sync::Mutex::new(0usize);
        let got = futures::executor::block_on(list_across(4, &opts, |i, o| {
            *asked.lock().unwrap() += o.max_keys;
            let r = fake_set(&held[i], &o);
            async move { Ok(r) }
        }))
        .unwrap();
        assert_eq!(got.objects.len(), 1000);
        assert_eq!(got.next_marker.as_deref(), Some("k00999"));
        let asked = *asked.lock().unwrap();
        assert!(
            asked < 1400,
            "asked the sets for {asked} entries for a page of 1000"
        );
    }

    #[test]
    fn uploads_merge_by_key_then_time() {
        let up = |k: &str, t: i64, id: &str| UploadInfo {
            bucket: "b".into(),
            key: k.into(),
            upload_id: id.into(),
            initiated_ns: t,
            checksum_algorithm: None,
        };
        let p1 = ListUploadsResult {
            uploads: vec![up("a", 2, "x"), up("c", 1, "y")],
            ..Default::default()
        };
        let p2 = ListUploadsResult {
            uploads: vec![up("a", 1, "w"), up("b", 5, "z")],
            ..Default::default()
        };
        let r = merge_upload_pages(vec![p1, p2], 3);
        let got: Vec<&str> = r.uploads.iter().map(|u| u.upload_id.as_str()).collect();
        assert_eq!(got, vec!["w", "x", "z"]);
        assert!(r.is_truncated);
        assert_eq!(r.next_key_marker.as_deref(), Some("b"));
        assert_eq!(r.next_upload_id_marker.as_deref(), Some("z"));
    }
}
