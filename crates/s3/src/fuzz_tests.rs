//! Fuzz-style robustness of the request parsers outside the signature module: the `Range`
//! header and the XML request bodies (CompleteMultipartUpload, DeleteObjects,
//! CreateBucketConfiguration). Arbitrary and structured-random inputs; no panic, and what the
//! parsers accept is consistent (a parsed range resolves inside the object or is refused).
//! The signature parsers have their own in `signature/fuzz_tests.rs`.
//!
//! Cases per property: [`DEFAULT_CASES`]; run longer by hand with `PROPTEST_CASES=100000`.

use proptest::prelude::*;

use crate::delete::parse_delete;
use crate::get::parse_range;
use crate::xml::{parse_complete_multipart_upload, parse_create_bucket_configuration};

pub(crate) const DEFAULT_CASES: u32 = 1000;

pub(crate) fn cases() -> ProptestConfig {
    cases_or(DEFAULT_CASES)
}

/// `default` cases, or `PROPTEST_CASES` when set.
pub(crate) fn cases_or(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// XML built from random pieces of the right vocabulary, so the parsers get past the first tag.
fn xml_soup() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("<?xml version=\"1.0\" encoding=\"UTF-8\"?>".to_string()),
        Just("<CompleteMultipartUpload>".to_string()),
        Just("</CompleteMultipartUpload>".to_string()),
        Just(
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                .to_string()
        ),
        Just("<Part>".to_string()),
        Just("</Part>".to_string()),
        Just("<PartNumber>".to_string()),
        Just("</PartNumber>".to_string()),
        Just("<ETag>".to_string()),
        Just("</ETag>".to_string()),
        Just("<ChecksumCRC32>".to_string()),
        Just("</ChecksumCRC32>".to_string()),
        Just("<Delete>".to_string()),
        Just("</Delete>".to_string()),
        Just("<Object>".to_string()),
        Just("</Object>".to_string()),
        Just("<Key>".to_string()),
        Just("</Key>".to_string()),
        Just("<VersionId>".to_string()),
        Just("</VersionId>".to_string()),
        Just("<Quiet>".to_string()),
        Just("</Quiet>".to_string()),
        Just("<CreateBucketConfiguration>".to_string()),
        Just("</CreateBucketConfiguration>".to_string()),
        Just("<LocationConstraint>".to_string()),
        Just("</LocationConstraint>".to_string()),
        Just("<!DOCTYPE x [<!ENTITY a \"aaaaaaaaaa\">]>".to_string()),
        Just("&a;".to_string()),
        Just("&amp;&lt;&#x41;&#0;&#xFFFFFFFF;".to_string()),
        Just("<![CDATA[x]]>".to_string()),
        Just("<!-- c -->".to_string()),
        Just("<a b='c'/>".to_string()),
        Just("true".to_string()),
        "[0-9]{1,12}",
        "-?[0-9]{1,25}",
        "[a-zA-Z0-9 <>/&;=\"é\u{1F600}]{0,12}",
        "[ \t\r\n]{0,3}",
    ];
    proptest::collection::vec(token, 0..40).prop_map(|v| v.concat())
}

fn parse_all_xml(b: &[u8]) {
    if let Ok(parts) = parse_complete_multipart_upload(b) {
        for p in &parts {
            // Whatever is accepted is a usable part list.
            assert!(p.part_number >= 1, "accepted part number {}", p.part_number);
        }
    }
    let _ = parse_delete(b);
    let _ = parse_create_bucket_configuration(b);
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn range_from_arbitrary_strings(s in "\\PC{0,40}") {
        let _ = parse_range(&s);
    }

    #[test]
    fn range_from_structured_strings(
        unit in prop_oneof![Just("bytes"), Just("BYTES"), Just(" bytes "), Just("items"), Just("")],
        first in proptest::option::of("[0-9]{0,25}"),
        last in proptest::option::of("[0-9]{0,25}"),
        sep in prop_oneof![Just("-"), Just("--"), Just(" - "), Just(",")],
        extra in prop_oneof![Just(""), Just(",0-1"), Just(" "), Just("x")],
        size in any::<u64>(),
    ) {
        let s = format!("{unit}={}{sep}{}{extra}", first.unwrap_or_default(), last.unwrap_or_default());
        if let Ok(Some(r)) = parse_range(&s) {
            if let Ok((off, len)) = r.resolve(size) {
                prop_assert!(len >= 1 && off.checked_add(len).is_some_and(|end| end <= size),
                    "{s} on {size} bytes resolved to offset {off}, length {len}");
            }
        }
    }

    #[test]
    fn xml_bodies_from_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..600)) {
        parse_all_xml(&b);
    }

}

/// Deep and wide documents: nesting of any depth (closed, unclosed, or mixed with S3's
/// vocabulary) and long runs of siblings. Never a panic or a stack overflow; a document deeper
/// than the bound is refused.
fn deep_or_wide() -> impl Strategy<Value = (String, usize)> {
    let names = prop_oneof![
        Just("a"),
        Just("Part"),
        Just("Delete"),
        Just("Object"),
        Just("CompleteMultipartUpload"),
        Just("CORSRule"),
    ];
    (
        names,
        0usize..60_000,
        prop_oneof![Just(0u8), Just(1), Just(2)],
        any::<bool>(),
    )
        .prop_map(|(name, n, shape, close)| {
            let doc = match shape {
                0 => {
                    let mut d = format!("<{name}>").repeat(n);
                    if close {
                        d.push_str(&format!("</{name}>").repeat(n));
                    }
                    d
                }
                1 => format!("<Delete>{}</Delete>", format!("<{name}/>").repeat(n)),
                _ => format!(
                    "<CompleteMultipartUpload>{}</CompleteMultipartUpload>",
                    "<Part><PartNumber>1</PartNumber><ETag>e</ETag></Part>".repeat(n / 8)
                ),
            };
            (doc, if shape == 0 { n } else { 0 })
        })
}

proptest! {
    #![proptest_config(cases_or(40))]

    #[test]
    fn xml_bodies_deep_and_wide((doc, depth) in deep_or_wide()) {
        parse_all_xml(doc.as_bytes());
        if depth > crate::xml::MAX_XML_DEPTH {
            prop_assert!(crate::xml::parse_document(doc.as_bytes()).is_err());
        }
    }
}

proptest! {
    // Generating the soup is the slow part (not parsing it): fewer cases by default.
    #![proptest_config(cases_or(300))]

    #[test]
    fn xml_bodies_from_xml_soup(s in xml_soup()) {
        parse_all_xml(s.as_bytes());
    }
}
