//! S3's XML: a small writer for the documents Quarry sends, a strict little reader for the ones it
//! receives (`CreateBucketConfiguration`), and the two text formats S3 uses inside them: timestamps
//! and `encoding-type=url` key encoding.
//!
//! The documents are written by hand rather than through serde so that element order, namespaces
//! and empty elements are exactly what S3 sends.

use std::borrow::Cow;
use std::fmt::Write as _;

use axum::body::Body;
use axum::response::Response;
use http::header::{HeaderValue, CONTENT_TYPE};
use quick_xml::events::Event;
use quick_xml::Reader;

use crate::error::{xml_escape, S3Error, S3ErrorCode};

/// The namespace of every S3 document.
pub const S3_XMLNS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";

/// The canonical id of the one owner of every bucket and object.
pub const OWNER_ID: &str = "71756172727900000000000000000000000000000000000000000000000000a1";
/// The display name of that owner.
pub const OWNER_DISPLAY_NAME: &str = "quarry";

/// An XML document as a complete response: status 200 and `Content-Type: application/xml`.
pub fn xml_response(doc: String) -> Response {
    let mut response = Response::new(Body::from(doc));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    response
}

/// Builds an XML document. Text is escaped; element names are trusted constants.
pub struct XmlWriter {
    out: String,
}

impl XmlWriter {
    /// Starts a document whose root element `root` carries the S3 namespace.
    pub fn new(root: &str) -> Self {
        let mut out = String::with_capacity(512);
        out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = write!(out, "<{root} xmlns=\"{S3_XMLNS}\">");
        XmlWriter { out }
    }

    /// Starts a document whose root element carries namespace `ns` (the IAM and STS APIs').
    pub fn with_namespace(root: &str, ns: &str) -> Self {
        let mut out = String::with_capacity(512);
        out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = write!(out, "<{root} xmlns=\"{ns}\">");
        XmlWriter { out }
    }

    pub fn open(&mut self, name: &str) -> &mut Self {
        let _ = write!(self.out, "<{name}>");
        self
    }

    pub fn close(&mut self, name: &str) -> &mut Self {
        let _ = write!(self.out, "</{name}>");
        self
    }

    /// `<name>text</name>`, with `text` escaped.
    pub fn elem(&mut self, name: &str, text: &str) -> &mut Self {
        let _ = write!(self.out, "<{name}>{}</{name}>", xml_escape(text));
        self
    }

    /// `<name>text</name>` when `text` is `Some`, nothing otherwise.
    pub fn elem_opt(&mut self, name: &str, text: Option<&str>) -> &mut Self {
        if let Some(text) = text {
            self.elem(name, text);
        }
        self
    }

    /// Escaped text inside the element that is open.
    pub fn text(&mut self, text: &str) -> &mut Self {
        self.out.push_str(&xml_escape(text));
        self
    }

    /// The `<Owner>` element: Quarry has a single owner of everything.
    pub fn owner(&mut self) -> &mut Self {
        self.open("Owner")
            .elem("ID", OWNER_ID)
            .elem("DisplayName", OWNER_DISPLAY_NAME)
            .close("Owner")
    }

    /// `<name>value</name>` for a number or a boolean.
    pub fn elem_display(&mut self, name: &str, value: impl std::fmt::Display) -> &mut Self {
        let _ = write!(self.out, "<{name}>{value}</{name}>");
        self
    }

    /// Closes the root element and returns the document.
    pub fn finish(mut self, root: &str) -> String {
        self.close(root);
        self.out
    }
}

/// One parsed XML element: its local name (namespace prefix dropped), its text and its children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    pub name: String,
    pub text: String,
    pub children: Vec<Element>,
}

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }
}

/// The deepest nesting [`parse_document`] accepts. S3's request documents are shallow (the
/// deepest, a lifecycle rule's `LifecycleConfiguration/Rule/Filter/And/Tag/Key`, is 6 levels);
/// the bound keeps a hostile body from building a tree whose recursive drop (and `Clone`, `Debug`,
/// `PartialEq`) would overflow the stack.
pub const MAX_XML_DEPTH: usize = 32;

/// The most elements [`parse_document`] accepts in one document: a CompleteMultipartUpload of
/// 10,000 parts, each with a number, an ETag and a checksum, is 40,001.
pub const MAX_XML_ELEMENTS: usize = 50_000;

/// Parses a small XML document into an element tree. Anything that is not well-formed XML, a DTD,
/// a document without exactly one root element, one nested deeper than [`MAX_XML_DEPTH`] or one
/// with more than [`MAX_XML_ELEMENTS`] elements is `MalformedXML`.
pub fn parse_document(body: &[u8]) -> Result<Element, S3Error> {
    let malformed = |detail: &str| {
        S3Error::new(
            S3ErrorCode::MalformedXML,
            format!("{} ({detail})", S3ErrorCode::MalformedXML.default_message()),
        )
    };
    let text = std::str::from_utf8(body).map_err(|_| malformed("not UTF-8"))?;
    let mut reader = Reader::from_str(text);
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut elements = 0usize;
    loop {
        let event = reader.read_event().map_err(|e| malformed(&e.to_string()))?;
        if matches!(event, Event::Start(_) | Event::Empty(_)) {
            elements += 1;
            if elements > MAX_XML_ELEMENTS {
                return Err(malformed("too many elements"));
            }
            if stack.len() >= MAX_XML_DEPTH {
                return Err(malformed("elements nested too deeply"));
            }
        }
        match event {
            Event::Start(start) => {
                if root.is_some() {
                    return Err(malformed("content after the root element"));
                }
                let name = local_name(start.local_name().as_ref())?;
                stack.push(Element {
                    name,
                    ..Element::default()
                });
            }
            Event::Empty(start) => {
                if root.is_some() {
                    return Err(malformed("content after the root element"));
                }
                let elem = Element {
                    name: local_name(start.local_name().as_ref())?,
                    ..Element::default()
                };
                match stack.last_mut() {
                    Some(parent) => parent.children.push(elem),
                    None => root = Some(elem),
                }
            }
            Event::End(_) => {
                // quick-xml checks that end names match their start tags.
                let elem = stack.pop().ok_or_else(|| malformed("unbalanced end tag"))?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(elem),
                    None => root = Some(elem),
                }
            }
            Event::Text(t) => {
                let s = t.xml_content().map_err(|e| malformed(&e.to_string()))?;
                push_text(&mut stack, &s)
                    .map_err(|()| malformed("text outside the root element"))?;
            }
            Event::CData(t) => {
                let s = t.decode().map_err(|e| malformed(&e.to_string()))?;
                push_text(&mut stack, &s)
                    .map_err(|()| malformed("text outside the root element"))?;
            }
            Event::GeneralRef(r) => {
                let resolved: Cow<'_, str> = match r.resolve_char_ref() {
                    Ok(Some(c)) => Cow::Owned(c.to_string()),
                    Ok(None) => {
                        let name = r.decode().map_err(|e| malformed(&e.to_string()))?;
                        match predefined_entity(&name) {
                            Some(s) => Cow::Borrowed(s),
                            None => return Err(malformed("unknown entity")),
                        }
                    }
                    Err(e) => return Err(malformed(&e.to_string())),
                };
                push_text(&mut stack, &resolved)
                    .map_err(|()| malformed("text outside the root element"))?;
            }
            Event::DocType(_) => return Err(malformed("DTDs are not accepted")),
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
    }
    if !stack.is_empty() {
        return Err(malformed("unclosed element"));
    }
    root.ok_or_else(|| malformed("no root element"))
}

fn local_name(raw: &[u8]) -> Result<String, S3Error> {
    std::str::from_utf8(raw)
        .map(str::to_owned)
        .map_err(|_| S3Error::from_code(S3ErrorCode::MalformedXML))
}

fn predefined_entity(name: &str) -> Option<&'static str> {
    Some(match name {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        _ => return None,
    })
}

/// Appends text to the open element; whitespace between elements and around the root is ignored.
fn push_text(stack: &mut [Element], s: &str) -> Result<(), ()> {
    match stack.last_mut() {
        Some(open) => {
            open.text.push_str(s);
            Ok(())
        }
        None if s.trim().is_empty() => Ok(()),
        None => Err(()),
    }
}

/// The `LocationConstraint` of a `CreateBucketConfiguration` body, or `None` for an empty body or
/// an empty constraint.
pub fn parse_create_bucket_configuration(body: &[u8]) -> Result<Option<String>, S3Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let root = parse_document(body)?;
    if root.name != "CreateBucketConfiguration" {
        return Err(S3Error::new(
            S3ErrorCode::MalformedXML,
            format!(
                "expected a CreateBucketConfiguration document, found <{}>",
                root.name
            ),
        ));
    }
    Ok(root
        .child("LocationConstraint")
        .map(|c| c.text.trim().to_owned())
        .filter(|c| !c.is_empty()))
}

// ---- multipart uploads ----

/// One `<Part>` of a `CompleteMultipartUpload` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedPartXml {
    pub part_number: u32,
    pub etag: String,
    /// `(algorithm element suffix, value)`, e.g. `("CRC32", "AAAAAA==")`, when the part names one.
    pub checksum: Option<(String, String)>,
}

/// Parses a `CompleteMultipartUpload` body: a list of parts with their number and ETag (and
/// optionally a checksum). No part, a part without number or ETag, or a number that is not an
/// integer is `MalformedXML`, as S3.
pub fn parse_complete_multipart_upload(body: &[u8]) -> Result<Vec<CompletedPartXml>, S3Error> {
    let malformed = |detail: &str| {
        S3Error::new(
            S3ErrorCode::MalformedXML,
            format!("{} ({detail})", S3ErrorCode::MalformedXML.default_message()),
        )
    };
    let root = parse_document(body)?;
    if root.name != "CompleteMultipartUpload" {
        return Err(malformed("expected a CompleteMultipartUpload document"));
    }
    let mut parts = Vec::new();
    for part in root.children.iter().filter(|c| c.name == "Part") {
        let number = part
            .child("PartNumber")
            .and_then(|n| n.text.trim().parse::<u32>().ok())
            .ok_or_else(|| malformed("a Part without a valid PartNumber"))?;
        let etag = part
            .child("ETag")
            .map(|e| e.text.trim().to_owned())
            .ok_or_else(|| malformed("a Part without an ETag"))?;
        let checksum = part.children.iter().find_map(|c| {
            c.name
                .strip_prefix("Checksum")
                .filter(|alg| !alg.is_empty() && *alg != "Type")
                .map(|alg| (alg.to_owned(), c.text.trim().to_owned()))
        });
        parts.push(CompletedPartXml {
            part_number: number,
            etag,
            checksum,
        });
    }
    if parts.is_empty() {
        return Err(malformed("the list of parts is empty"));
    }
    Ok(parts)
}

/// `ChecksumCRC32` and the like: the element of a checksum algorithm named as stored (`crc32`).
pub fn checksum_element(algorithm: &str) -> String {
    format!(
        "Checksum{}",
        upload_algorithm(algorithm).0.to_ascii_uppercase()
    )
}

/// The `ChecksumType` of stored checksum values: COMPOSITE when any is a checksum of part
/// checksums (it carries their count, `...-N`), FULL_OBJECT otherwise.
pub fn checksum_type<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> &'static str {
    if values.into_iter().any(|v| v.as_ref().contains('-')) {
        "COMPOSITE"
    } else {
        "FULL_OBJECT"
    }
}

/// An upload's recorded checksum algorithm as (algorithm name, checksum type), see
/// [`crate::multipart::UploadChecksum`].
fn upload_algorithm(recorded: &str) -> (&str, &'static str) {
    match crate::multipart::UploadChecksum::parse(recorded) {
        Some(u) => (u.algorithm.name(), u.type_name()),
        None => (recorded, "COMPOSITE"),
    }
}

/// The answer to CreateMultipartUpload.
pub fn initiate_multipart_upload_result(bucket: &str, key: &str, upload_id: &str) -> String {
    let mut w = XmlWriter::new("InitiateMultipartUploadResult");
    w.elem("Bucket", bucket)
        .elem("Key", key)
        .elem("UploadId", upload_id);
    w.finish("InitiateMultipartUploadResult")
}

/// The answer to CompleteMultipartUpload. `checksum` is `(algorithm, value)` of the object.
pub fn complete_multipart_upload_result(
    location: &str,
    bucket: &str,
    key: &str,
    etag: &str,
    checksum: Option<(&str, &str)>,
) -> String {
    let mut w = XmlWriter::new("CompleteMultipartUploadResult");
    w.elem("Location", location)
        .elem("Bucket", bucket)
        .elem("Key", key)
        .elem("ETag", &format!("\"{etag}\""));
    if let Some((alg, value)) = checksum {
        w.elem(&checksum_element(alg), value)
            .elem("ChecksumType", checksum_type([value]));
    }
    w.finish("CompleteMultipartUploadResult")
}

/// The answer to UploadPartCopy.
pub fn copy_part_result(etag: &str, mod_time_ns: i64, checksum: Option<(&str, &str)>) -> String {
    let mut w = XmlWriter::new("CopyPartResult");
    w.elem("ETag", &format!("\"{etag}\""))
        .elem("LastModified", &iso8601(mod_time_ns));
    if let Some((alg, value)) = checksum {
        w.elem(&checksum_element(alg), value);
    }
    w.finish("CopyPartResult")
}

/// The answer to ListParts.
pub fn list_parts_result(
    r: &quarry_object::ListPartsResult,
    part_number_marker: u32,
    max_parts: usize,
) -> String {
    let mut w = XmlWriter::new("ListPartsResult");
    w.elem("Bucket", &r.upload.bucket)
        .elem("Key", &r.upload.key)
        .elem("UploadId", &r.upload.upload_id)
        .elem_display("PartNumberMarker", part_number_marker);
    if let Some(next) = r.next_part_number_marker {
        w.elem_display("NextPartNumberMarker", next);
    }
    w.elem_display("MaxParts", max_parts)
        .elem_display("IsTruncated", r.is_truncated);
    for p in &r.parts {
        w.open("Part")
            .elem_display("PartNumber", p.number)
            .elem("LastModified", &iso8601(p.mod_time_ns))
            .elem("ETag", &format!("\"{}\"", p.etag))
            .elem_display("Size", p.size);
        if let (Some(alg), Some(sum)) = (&r.upload.checksum_algorithm, &p.checksum) {
            w.elem(&checksum_element(alg), sum);
        }
        w.close("Part");
    }
    w.open("Initiator")
        .elem("ID", OWNER_ID)
        .elem("DisplayName", OWNER_DISPLAY_NAME)
        .close("Initiator")
        .owner()
        .elem("StorageClass", "STANDARD");
    if let Some(alg) = &r.upload.checksum_algorithm {
        let (name, kind) = upload_algorithm(alg);
        w.elem("ChecksumAlgorithm", name).elem("ChecksumType", kind);
    }
    w.finish("ListPartsResult")
}

/// The request parameters ListMultipartUploads echoes back.
#[derive(Debug, Clone, Default)]
pub struct ListUploadsEcho<'a> {
    pub bucket: &'a str,
    pub prefix: &'a str,
    pub delimiter: Option<&'a str>,
    pub key_marker: Option<&'a str>,
    pub upload_id_marker: Option<&'a str>,
    pub max_uploads: usize,
    /// `encoding-type=url`: keys, prefixes and markers are URL-encoded.
    pub url_encoded: bool,
}

/// The answer to ListMultipartUploads.
pub fn list_multipart_uploads_result(
    r: &quarry_object::ListUploadsResult,
    echo: &ListUploadsEcho<'_>,
) -> String {
    let enc = |s: &str| {
        if echo.url_encoded {
            url_encode(s)
        } else {
            s.to_owned()
        }
    };
    let mut w = XmlWriter::new("ListMultipartUploadsResult");
    w.elem("Bucket", echo.bucket)
        .elem("KeyMarker", &enc(echo.key_marker.unwrap_or("")))
        .elem("UploadIdMarker", echo.upload_id_marker.unwrap_or(""));
    if let Some(k) = &r.next_key_marker {
        w.elem("NextKeyMarker", &enc(k));
    }
    if let Some(u) = &r.next_upload_id_marker {
        w.elem("NextUploadIdMarker", u);
    }
    if let Some(d) = echo.delimiter {
        w.elem("Delimiter", &enc(d));
    }
    w.elem("Prefix", &enc(echo.prefix))
        .elem_display("MaxUploads", echo.max_uploads)
        .elem_display("IsTruncated", r.is_truncated);
    for u in &r.uploads {
        w.open("Upload")
            .elem("Key", &enc(&u.key))
            .elem("UploadId", &u.upload_id)
            .open("Initiator")
            .elem("ID", OWNER_ID)
            .elem("DisplayName", OWNER_DISPLAY_NAME)
            .close("Initiator")
            .owner()
            .elem("StorageClass", "STANDARD")
            .elem("Initiated", &iso8601(u.initiated_ns));
        if let Some(alg) = &u.checksum_algorithm {
            let (name, kind) = upload_algorithm(alg);
            w.elem("ChecksumAlgorithm", name).elem("ChecksumType", kind);
        }
        w.close("Upload");
    }
    for p in &r.common_prefixes {
        w.open("CommonPrefixes")
            .elem("Prefix", &enc(p))
            .close("CommonPrefixes");
    }
    if echo.url_encoded {
        w.elem("EncodingType", "url");
    }
    w.finish("ListMultipartUploadsResult")
}

/// Formats nanoseconds since the Unix epoch as S3's XML timestamp, `2026-11-29T10:11:12.000Z`.
pub fn iso8601(ns: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns.max(0)))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// Formats nanoseconds since the Unix epoch as an HTTP date (`Last-Modified`).
pub fn http_date(ns: i64) -> String {
    httpdate::fmt_http_date(system_time(ns))
}

/// Nanoseconds since the Unix epoch as a `SystemTime` (times before the epoch become the epoch).
pub fn system_time(ns: i64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_nanos(u64::try_from(ns).unwrap_or(0))
}

/// Encodes a key, prefix, marker or delimiter for `encoding-type=url` as S3 does: every byte
/// outside `A-Z a-z 0-9 - _ . / *` as `%XX`, a space too (`%20`, never `+`, which a client could
/// not tell from a `+` in the key: S3 sends `quux%20ab/` for `quux ab/`).
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'/' | b'*' => {
                out.push(b as char)
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        let mut doc = String::with_capacity(depth * 8);
        for _ in 0..depth {
            doc.push_str("<a>");
        }
        for _ in 0..depth {
            doc.push_str("</a>");
        }
        doc
    }

    /// A hostile nesting is refused as MalformedXML (before the bound it built a 40,000-deep tree
    /// whose drop overflowed the stack and aborted the process); S3's own depth passes.
    #[test]
    fn deep_documents_are_refused() {
        for depth in [MAX_XML_DEPTH + 1, 1000, 40_000, 200_000] {
            let e = parse_document(nested(depth).as_bytes()).unwrap_err();
            assert_eq!(e.code, S3ErrorCode::MalformedXML, "depth {depth}");
            assert!(e.message.contains("nested too deeply"), "{}", e.message);
            // Unclosed, as an attacker would send it.
            let open = "<a>".repeat(depth);
            assert_eq!(
                parse_document(open.as_bytes()).unwrap_err().code,
                S3ErrorCode::MalformedXML
            );
        }
        let doc = parse_document(nested(MAX_XML_DEPTH).as_bytes()).unwrap();
        assert_eq!(doc.name, "a");
        let lifecycle = "<LifecycleConfiguration><Rule><Filter><And><Tag><Key>k</Key></Tag></And></Filter></Rule></LifecycleConfiguration>";
        let doc = parse_document(lifecycle.as_bytes()).unwrap();
        assert_eq!(doc.children[0].children[0].name, "Filter");
    }

    /// Wide documents: up to the element bound they parse; past it they are refused.
    #[test]
    fn wide_documents_are_bounded() {
        let wide = |n: usize| format!("<Delete>{}</Delete>", "<Object/>".repeat(n - 1));
        let doc = parse_document(wide(MAX_XML_ELEMENTS).as_bytes()).unwrap();
        assert_eq!(doc.children.len(), MAX_XML_ELEMENTS - 1);
        let e = parse_document(wide(MAX_XML_ELEMENTS + 1).as_bytes()).unwrap_err();
        assert_eq!(e.code, S3ErrorCode::MalformedXML);
        assert!(e.message.contains("too many elements"), "{}", e.message);
        // 10,000 parts of CompleteMultipartUpload (S3's maximum) still parse.
        let parts: String = (1..=10_000)
            .map(|n| format!("<Part><PartNumber>{n}</PartNumber><ETag>\"e\"</ETag><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part>"))
            .collect();
        let body = format!("<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>");
        assert_eq!(
            parse_complete_multipart_upload(body.as_bytes())
                .unwrap()
                .len(),
            10_000
        );
    }

    #[test]
    fn complete_multipart_upload_is_parsed() {
        let body = br#"<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
            <Part><PartNumber>1</PartNumber><ETag>"a1"</ETag><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part>
            <Part><ETag>b2</ETag><PartNumber> 3 </PartNumber></Part>
        </CompleteMultipartUpload>"#;
        let parts = parse_complete_multipart_upload(body).unwrap();
        assert_eq!(
            parts,
            vec![
                CompletedPartXml {
                    part_number: 1,
                    etag: "\"a1\"".into(),
                    checksum: Some(("CRC32".into(), "AAAAAA==".into())),
                },
                CompletedPartXml {
                    part_number: 3,
                    etag: "b2".into(),
                    checksum: None,
                },
            ]
        );
        for bad in [
            &b"<CompleteMultipartUpload></CompleteMultipartUpload>"[..],
            b"<CompleteMultipartUpload><Part><ETag>x</ETag></Part></CompleteMultipartUpload>",
            b"<CompleteMultipartUpload><Part><PartNumber>x</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>",
            b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part></CompleteMultipartUpload>",
            b"<Other/>",
            b"<CompleteMultipartUpload>",
        ] {
            assert_eq!(
                parse_complete_multipart_upload(bad).unwrap_err().code,
                S3ErrorCode::MalformedXML,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn writer_escapes_text_and_closes_root() {
        let mut w = XmlWriter::new("Root");
        w.elem("Key", "a<b&\"c\"")
            .elem_display("Size", 3u64)
            .elem_opt("None", None);
        let doc = w.finish("Root");
        assert_eq!(
            doc,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Root xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <Key>a&lt;b&amp;&quot;c&quot;</Key><Size>3</Size></Root>"
        );
    }

    #[test]
    fn create_bucket_configuration_is_parsed() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
   <LocationConstraint>eu-west-1</LocationConstraint>
</CreateBucketConfiguration>"#;
        assert_eq!(
            parse_create_bucket_configuration(body).unwrap().as_deref(),
            Some("eu-west-1")
        );
        let empty =
            br#"<CreateBucketConfiguration><LocationConstraint/></CreateBucketConfiguration>"#;
        assert_eq!(parse_create_bucket_configuration(empty).unwrap(), None);
        assert_eq!(parse_create_bucket_configuration(b"").unwrap(), None);
        assert_eq!(parse_create_bucket_configuration(b" \n").unwrap(), None);
        let prefixed = br#"<s3:CreateBucketConfiguration xmlns:s3="x"><s3:LocationConstraint>r&amp;1</s3:LocationConstraint></s3:CreateBucketConfiguration>"#;
        assert_eq!(
            parse_create_bucket_configuration(prefixed)
                .unwrap()
                .as_deref(),
            Some("r&1")
        );
    }

    #[test]
    fn malformed_xml_is_rejected() {
        for body in [
            &b"<CreateBucketConfiguration><LocationConstraint>x</CreateBucketConfiguration>"[..],
            b"<CreateBucketConfiguration>",
            b"not xml at all",
            b"<CreateBucketConfiguration/><Other/>",
            b"<!DOCTYPE x [<!ENTITY e \"y\">]><CreateBucketConfiguration/>",
            b"<CreateBucketConfiguration>&unknown;</CreateBucketConfiguration>",
            b"<Wrong><LocationConstraint>x</LocationConstraint></Wrong>",
            b"\xff\xfe",
        ] {
            let err = parse_create_bucket_configuration(body).unwrap_err();
            assert_eq!(
                err.code,
                S3ErrorCode::MalformedXML,
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            iso8601(1_795_947_072_123_456_789),
            "2026-11-29T10:11:12.123Z"
        );
        assert_eq!(
            http_date(1_795_947_072_123_456_789),
            "Sun, 29 Nov 2026 10:11:12 GMT"
        );
    }

    #[test]
    fn url_encoding_matches_s3() {
        assert_eq!(url_encode("a b/c*d~e+f%g"), "a%20b/c*d%7Ee%2Bf%25g");
        assert_eq!(url_encode("é\u{1}"), "%C3%A9%01");
        assert_eq!(url_encode("Az09-_."), "Az09-_.");
    }
}
