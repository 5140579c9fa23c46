//! Merging the listing pages of several erasure sets into one page, as a cluster lists.
//!
//! Every set lists the same request; the merge keeps the first `max` entries in S3 order. A set
//! whose page is truncated returned `max` entries up to its last one, so every entry kept is at
//! or before any truncated set's last entry: nothing is skipped, and the next page starts after
//! the last entry kept.

use crate::api::{ListResult, ObjectInfo};
use crate::api::{ListUploadsResult, UploadInfo};

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
