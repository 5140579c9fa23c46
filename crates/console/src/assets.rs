//! The console's web assets, embedded in the binary at build time (plain HTML, CSS and ES
//! modules: no toolchain beyond cargo), and how they are served.
//!
//! Caching by content hash: every asset lives under `/static/<build>/<name>`, where `<build>`
//! is a hash of all the assets, and is served `immutable` for a year; the page itself
//! (`index.html`, which names the current `<build>`) is never cached. A new binary with changed
//! assets has a new `<build>`, so a browser never mixes old and new modules. Modules import each
//! other by relative path, so they stay under the same `<build>`.

use std::sync::OnceLock;

use axum::body::Body;
use axum::response::Response;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, ETAG};
use http::StatusCode;
use sha2::{Digest, Sha256};

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $ty:expr) => {
        Asset {
            name: $name,
            content_type: $ty,
            bytes: include_bytes!(concat!("../assets/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static ASSETS: &[Asset] = &[
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("ui.js", JS),
    asset!("objects.js", JS),
    asset!("upload.js", JS),
    asset!("cluster.js", JS),
    asset!("identity.js", JS),
    asset!("chart.js", JS),
    asset!("metrics.js", JS),
    asset!("favicon.svg", "image/svg+xml"),
];

static INDEX: &str = include_str!("../assets/index.html");

/// The hash of every asset's name and bytes: the `<build>` in asset paths.
pub fn build_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let mut h = Sha256::new();
        h.update(INDEX.as_bytes());
        for a in ASSETS {
            h.update(a.name.as_bytes());
            h.update((a.bytes.len() as u64).to_be_bytes());
            h.update(a.bytes);
        }
        hex::encode(&h.finalize()[..8])
    })
}

/// The page, with the current build's asset paths.
pub fn index() -> Response {
    static PAGE: OnceLock<String> = OnceLock::new();
    let page = PAGE.get_or_init(|| INDEX.replace("{{BUILD}}", build_id()));
    let mut r = Response::new(Body::from(page.as_str()));
    let h = r.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-store"),
    );
    r
}

/// `/static/<build>/<name>`: the asset, cached for good; 404 for another build or name (a
/// page of an older binary asks again from its new index).
pub fn asset(build: &str, name: &str) -> Response {
    let found = (build == build_id())
        .then(|| ASSETS.iter().find(|a| a.name == name))
        .flatten();
    let Some(a) = found else {
        let mut r = Response::new(Body::from("Not found"));
        *r.status_mut() = StatusCode::NOT_FOUND;
        r.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        return r;
    };
    let mut r = Response::new(Body::from(a.bytes));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(a.content_type));
    h.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", build_id())) {
        h.insert(ETAG, v);
    }
    r
}

/// The total size of the embedded assets, in bytes.
pub fn total_bytes() -> usize {
    INDEX.len() + ASSETS.iter().map(|a| a.bytes.len()).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_or_a_module_imports_is_embedded() {
        let names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        let mut texts = vec![INDEX.to_owned()];
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            texts.push(String::from_utf8_lossy(a.bytes).into_owned());
        }
        for t in &texts {
            for piece in t.split(['"', '\'']) {
                let name = piece
                    .strip_prefix("./")
                    .or_else(|| piece.strip_prefix("/static/{{BUILD}}/"));
                if let Some(name) = name.filter(|n| n.ends_with(".js") || n.ends_with(".css")) {
                    assert!(
                        names.contains(&name),
                        "{name} is referenced but not embedded"
                    );
                }
            }
        }
    }

    #[test]
    fn another_build_is_not_found() {
        assert_eq!(asset(build_id(), "app.js").status(), StatusCode::OK);
        assert_eq!(asset("0000", "app.js").status(), StatusCode::NOT_FOUND);
        assert_eq!(
            asset(build_id(), "../Cargo.toml").status(),
            StatusCode::NOT_FOUND
        );
    }
}
