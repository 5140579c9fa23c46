//! Cross-origin resource sharing: the bucket `cors` configuration (PutBucketCors, GetBucketCors,
//! DeleteBucketCors), the unauthenticated preflight (`OPTIONS`), and the CORS headers of actual
//! requests that carry an `Origin`.
//!
//! The configuration is stored (through the object layer's bucket configuration documents, name
//! `cors`) as the normalized `CORSConfiguration` XML that GetBucketCors returns. Parsed
//! configurations are cached per bucket for a few seconds ([`CorsCache`]): a browser sends an
//! `Origin` with every request, and the configuration must not be read from the drives for each.
//! Requests without an `Origin` never look at it.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use md5::{Digest, Md5};

use crate::api_error::{ApiError, ApiResult};
use crate::config_cache::{CachedConfig, ConfigCache};
use crate::error::{S3Error, S3ErrorCode};
use crate::server::{AppState, ReqCtx};
use crate::xml::{self, XmlWriter};

/// The name of the bucket configuration document.
const CONFIG_NAME: &str = "cors";
/// The largest CORS configuration S3 accepts, in bytes.
pub const MAX_CORS_CONFIG: usize = 64 * 1024;
/// The most rules one configuration may have.
pub const MAX_CORS_RULES: usize = 100;
/// The methods a rule may allow.
const CORS_METHODS: &[&str] = &["GET", "PUT", "HEAD", "POST", "DELETE"];
/// How long a parsed configuration is used before it is read again.
const CACHE_TTL: Duration = Duration::from_secs(5);

/// One `CORSRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorsRule {
    pub id: Option<String>,
    pub allowed_origins: Vec<String>,
    pub allowed_methods: Vec<String>,
    pub allowed_headers: Vec<String>,
    pub expose_headers: Vec<String>,
    pub max_age_seconds: Option<u32>,
}

/// A bucket's `CORSConfiguration`: rules, tried in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorsConfig {
    pub rules: Vec<CorsRule>,
}

fn malformed(detail: impl std::fmt::Display) -> S3Error {
    S3Error::new(
        S3ErrorCode::MalformedXML,
        format!("{} ({detail})", S3ErrorCode::MalformedXML.default_message()),
    )
}

fn invalid(message: impl Into<String>) -> S3Error {
    S3Error::new(S3ErrorCode::InvalidRequest, message)
}

impl CorsConfig {
    /// Parses and validates a `CORSConfiguration` document as S3 does: `MalformedXML` for a
    /// document that does not follow the schema (no rule, a rule without an origin or a method,
    /// an unknown element, a `MaxAgeSeconds` that is not a number), `InvalidRequest` for values S3
    /// refuses (an unsupported method, more than one wildcard, too many rules, a long ID).
    pub fn parse(body: &[u8]) -> Result<CorsConfig, S3Error> {
        if body.len() > MAX_CORS_CONFIG {
            return Err(invalid(format!(
                "The CORS configuration is larger than the {MAX_CORS_CONFIG} bytes allowed."
            )));
        }
        let root = xml::parse_document(body)?;
        if root.name != "CORSConfiguration" {
            return Err(malformed(format!(
                "expected a CORSConfiguration document, found <{}>",
                root.name
            )));
        }
        let mut rules = Vec::new();
        for child in &root.children {
            if child.name != "CORSRule" {
                return Err(malformed(format!(
                    "unexpected <{}> in CORSConfiguration",
                    child.name
                )));
            }
            rules.push(parse_rule(child)?);
        }
        if rules.is_empty() {
            return Err(malformed("a CORSConfiguration needs at least one CORSRule"));
        }
        if rules.len() > MAX_CORS_RULES {
            return Err(invalid(format!(
                "The number of CORS rules should not exceed allowed limit of {MAX_CORS_RULES} rules."
            )));
        }
        Ok(CorsConfig { rules })
    }

    /// The document GetBucketCors returns (and the form it is stored in).
    pub fn to_xml(&self) -> String {
        let mut w = XmlWriter::new("CORSConfiguration");
        for rule in &self.rules {
            w.open("CORSRule");
            w.elem_opt("ID", rule.id.as_deref());
            for h in &rule.allowed_headers {
                w.elem("AllowedHeader", h);
            }
            for m in &rule.allowed_methods {
                w.elem("AllowedMethod", m);
            }
            for o in &rule.allowed_origins {
                w.elem("AllowedOrigin", o);
            }
            for h in &rule.expose_headers {
                w.elem("ExposeHeader", h);
            }
            if let Some(age) = rule.max_age_seconds {
                w.elem_display("MaxAgeSeconds", age);
            }
            w.close("CORSRule");
        }
        w.finish("CORSConfiguration")
    }

    /// The first rule that allows `origin` to use `method` with the (lower- or mixed-case)
    /// request headers `headers`.
    pub fn find_rule(&self, origin: &str, method: &str, headers: &[&str]) -> Option<&CorsRule> {
        self.rules
            .iter()
            .find(|r| r.allows(origin, method, headers))
    }
}

fn parse_rule(elem: &xml::Element) -> Result<CorsRule, S3Error> {
    let mut rule = CorsRule::default();
    for c in &elem.children {
        let text = c.text.trim();
        if !c.children.is_empty() {
            return Err(malformed(format!("<{}> may only hold text", c.name)));
        }
        match c.name.as_str() {
            "ID" => {
                if rule.id.is_some() {
                    return Err(malformed("more than one <ID> in a CORSRule"));
                }
                if text.chars().count() > 255 {
                    return Err(invalid("ID length should not exceed allowed limit of 255"));
                }
                rule.id = Some(text.to_owned());
            }
            "AllowedOrigin" => {
                if text.matches('*').count() > 1 {
                    return Err(invalid(format!(
                        "AllowedOrigin \"{text}\" can not have more than one wildcard."
                    )));
                }
                rule.allowed_origins.push(text.to_owned());
            }
            "AllowedMethod" => {
                if !CORS_METHODS.contains(&text) {
                    return Err(invalid(format!(
                        "Found unsupported HTTP method in CORS config. Unsupported method is {text}"
                    )));
                }
                rule.allowed_methods.push(text.to_owned());
            }
            "AllowedHeader" => {
                if text.matches('*').count() > 1 {
                    return Err(invalid(format!(
                        "AllowedHeader \"{text}\" can not have more than one wildcard."
                    )));
                }
                rule.allowed_headers.push(text.to_owned());
            }
            "ExposeHeader" => {
                if text.contains('*') && text != "*" {
                    return Err(invalid(format!(
                        "ExposeHeader \"{text}\" contains wildcard. We currently do not support wildcard for ExposeHeader."
                    )));
                }
                rule.expose_headers.push(text.to_owned());
            }
            "MaxAgeSeconds" => {
                if rule.max_age_seconds.is_some() {
                    return Err(malformed("more than one <MaxAgeSeconds> in a CORSRule"));
                }
                let age = text
                    .parse::<u32>()
                    .map_err(|_| malformed(format!("MaxAgeSeconds {text:?} is not a number")))?;
                rule.max_age_seconds = Some(age);
            }
            other => return Err(malformed(format!("unexpected <{other}> in CORSRule"))),
        }
    }
    if rule.allowed_origins.is_empty() {
        return Err(malformed("a CORSRule needs at least one AllowedOrigin"));
    }
    if rule.allowed_methods.is_empty() {
        return Err(malformed("a CORSRule needs at least one AllowedMethod"));
    }
    Ok(rule)
}

/// `pattern` with at most one `*` standing for any run of characters.
fn wildcard_match(pattern: &str, s: &str, ignore_case: bool) -> bool {
    let eq = |a: &str, b: &str| {
        if ignore_case {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    match pattern.split_once('*') {
        None => eq(pattern, s),
        Some((prefix, suffix)) => {
            s.len() >= prefix.len() + suffix.len()
                && s.get(..prefix.len()).is_some_and(|p| eq(p, prefix))
                && s.get(s.len() - suffix.len()..)
                    .is_some_and(|x| eq(x, suffix))
        }
    }
}

impl CorsRule {
    fn allows_origin(&self, origin: &str) -> bool {
        self.allowed_origins
            .iter()
            .any(|o| wildcard_match(o, origin, false))
    }

    fn allows(&self, origin: &str, method: &str, headers: &[&str]) -> bool {
        self.allows_origin(origin)
            && self.allowed_methods.iter().any(|m| m == method)
            && headers.iter().all(|h| {
                self.allowed_headers
                    .iter()
                    .any(|a| wildcard_match(a, h, true))
            })
    }

    /// Whether the origin is allowed through a bare `*` (then S3 answers `*` and no credentials).
    fn any_origin(&self) -> bool {
        self.allowed_origins.iter().any(|o| o == "*")
    }

    /// The headers of an answer under this rule, common to preflight and actual requests.
    fn common_headers(&self, origin: &str, out: &mut HeaderMap) {
        if self.any_origin() {
            out.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
        } else {
            if let Ok(v) = HeaderValue::from_str(origin) {
                out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
            }
            out.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        if let Ok(v) = HeaderValue::from_str(&self.allowed_methods.join(", ")) {
            out.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
        }
        if !self.expose_headers.is_empty() {
            if let Ok(v) = HeaderValue::from_str(&self.expose_headers.join(", ")) {
                out.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, v);
            }
        }
        if let Some(age) = self.max_age_seconds {
            out.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from(age));
        }
        out.insert(
            header::VARY,
            HeaderValue::from_static(
                "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
            ),
        );
    }
}

/// Parsed CORS configurations by bucket ([`crate::config_cache`]).
pub(crate) type CorsCache = ConfigCache<CorsConfig>;

impl CachedConfig for CorsConfig {
    const NAME: &'static str = CONFIG_NAME;
    const TTL: Duration = CACHE_TTL;
    const WHAT: &'static str = "CORS configuration";
    fn parse(_bucket: &str, raw: &[u8]) -> Result<Self, S3Error> {
        CorsConfig::parse(raw)
    }
}

pub async fn put_bucket_cors(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let expected_md5 = crate::headers::content_md5(&ctx.parts.headers)?;
    let body = ctx.small_body().await?;
    if let Some(md5) = expected_md5 {
        if Md5::digest(&body)[..] != md5[..] {
            return Err(S3ErrorCode::BadDigest.into());
        }
    }
    let config = CorsConfig::parse(&body)?;
    let doc = config.to_xml();
    ctx.layer()
        .put_bucket_config(bucket, CONFIG_NAME, Bytes::from(doc))
        .await?;
    ctx.state.cors.invalidate(bucket);
    Ok(Response::new(Body::empty()))
}

pub async fn get_bucket_cors(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    match ctx.layer().get_bucket_config(bucket, CONFIG_NAME).await? {
        Some(raw) => {
            // Stored normalized; re-rendering also drops anything a future version might add.
            let config = CorsConfig::parse(&raw).map_err(|e| {
                tracing::error!(bucket, error = %e, "stored CORS configuration does not parse");
                ApiError::from(S3ErrorCode::InternalError)
            })?;
            Ok(xml::xml_response(config.to_xml()))
        }
        None => Err(S3ErrorCode::NoSuchCORSConfiguration.into()),
    }
}

pub async fn delete_bucket_cors(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer()
        .delete_bucket_config(bucket, CONFIG_NAME)
        .await?;
    ctx.state.cors.invalidate(bucket);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

fn header_str<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// `OPTIONS /bucket/key`: answered from the bucket's CORS rules, without authentication.
pub(crate) async fn preflight(
    state: &AppState,
    headers: &HeaderMap,
    bucket: &str,
) -> ApiResult<Response> {
    let Some(origin) = header_str(headers, &header::ORIGIN).filter(|o| !o.is_empty()) else {
        return Err(ApiError::new(
            S3ErrorCode::BadRequest,
            "Insufficient information. Origin request header needed.",
        ));
    };
    let method = header_str(headers, &header::ACCESS_CONTROL_REQUEST_METHOD).unwrap_or("");
    if !CORS_METHODS.contains(&method) {
        return Err(ApiError::new(
            S3ErrorCode::BadRequest,
            format!(
                "Invalid Access-Control-Request-Method: {}",
                if method.is_empty() { "null" } else { method }
            ),
        ));
    }
    let requested: Vec<&str> = headers
        .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();

    let Some(config) = state.cors.get(&*state.layer, bucket).await? else {
        // No configuration, or no bucket: only then ask which (the common case is cached).
        state.layer.bucket_info(bucket).await?;
        return Err(ApiError::new(
            S3ErrorCode::AccessForbidden,
            "CORSResponse: CORS is not enabled for this bucket.",
        ));
    };
    let Some(rule) = config.find_rule(origin, method, &requested) else {
        return Err(ApiError::new(
            S3ErrorCode::AccessForbidden,
            "CORSResponse: This CORS request is not allowed. This is usually because the evalution of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
        ));
    };
    let mut response = Response::new(Body::empty());
    let out = response.headers_mut();
    rule.common_headers(origin, out);
    if !requested.is_empty() {
        let list = requested
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(", ");
        if let Ok(v) = HeaderValue::from_str(&list) {
            out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
        }
    }
    out.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    Ok(response)
}

/// Adds the CORS headers to the response of an actual (non-preflight) request that carried
/// `origin`, when a rule of the bucket allows that origin and method.
pub(crate) async fn apply_actual(
    state: &AppState,
    bucket: &str,
    origin: &str,
    method: &http::Method,
    response: &mut Response,
) {
    let config = match state.cors.get(&*state.layer, bucket).await {
        Ok(Some(config)) => config,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(bucket, error = %e, "cannot read the CORS configuration");
            return;
        }
    };
    if let Some(rule) = config.find_rule(origin, method.as_str(), &[]) {
        rule.common_headers(origin, response.headers_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"<CORSConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
      <CORSRule>
        <ID>web</ID>
        <AllowedOrigin>https://*.example.com</AllowedOrigin>
        <AllowedMethod>GET</AllowedMethod>
        <AllowedMethod>PUT</AllowedMethod>
        <AllowedHeader>x-amz-*</AllowedHeader>
        <AllowedHeader>Content-Type</AllowedHeader>
        <ExposeHeader>ETag</ExposeHeader>
        <MaxAgeSeconds>3000</MaxAgeSeconds>
      </CORSRule>
      <CORSRule>
        <AllowedOrigin>*</AllowedOrigin>
        <AllowedMethod>GET</AllowedMethod>
      </CORSRule>
    </CORSConfiguration>"#;

    fn code(doc: &str) -> S3ErrorCode {
        CorsConfig::parse(doc.as_bytes()).unwrap_err().code
    }

    #[test]
    fn parses_and_round_trips() {
        let c = CorsConfig::parse(DOC.as_bytes()).unwrap();
        assert_eq!(c.rules.len(), 2);
        let r = &c.rules[0];
        assert_eq!(r.id.as_deref(), Some("web"));
        assert_eq!(r.allowed_methods, ["GET", "PUT"]);
        assert_eq!(r.allowed_headers, ["x-amz-*", "Content-Type"]);
        assert_eq!(r.expose_headers, ["ETag"]);
        assert_eq!(r.max_age_seconds, Some(3000));
        let again = CorsConfig::parse(c.to_xml().as_bytes()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn validates_as_s3() {
        use S3ErrorCode::*;
        let rule = |inner: &str| {
            format!("<CORSConfiguration><CORSRule>{inner}</CORSRule></CORSConfiguration>")
        };
        assert_eq!(code("<CORSConfiguration/>"), MalformedXML);
        assert_eq!(code("<Other/>"), MalformedXML);
        assert_eq!(code("not xml"), MalformedXML);
        assert_eq!(
            code(&rule("<AllowedMethod>GET</AllowedMethod>")),
            MalformedXML
        );
        assert_eq!(
            code(&rule("<AllowedOrigin>*</AllowedOrigin>")),
            MalformedXML
        );
        assert_eq!(
            code(&rule(
                "<AllowedOrigin>*</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod>"
            )),
            InvalidRequest
        );
        assert_eq!(
            code(&rule(
                "<AllowedOrigin>*.*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
            )),
            InvalidRequest
        );
        assert_eq!(
            code(&rule("<AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><AllowedHeader>a*b*</AllowedHeader>")),
            InvalidRequest
        );
        assert_eq!(
            code(&rule("<AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><MaxAgeSeconds>x</MaxAgeSeconds>")),
            MalformedXML
        );
        assert_eq!(
            code(&rule(
                "<AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><Bogus/>"
            )),
            MalformedXML
        );
        let long_id = format!(
            "<ID>{}</ID><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>",
            "i".repeat(256)
        );
        assert_eq!(code(&rule(&long_id)), InvalidRequest);
        let many = format!(
            "<CORSConfiguration>{}</CORSConfiguration>",
            "<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>"
                .repeat(101)
        );
        assert_eq!(code(&many), InvalidRequest);
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*", "anything", false));
        assert!(wildcard_match(
            "https://*.example.com",
            "https://a.b.example.com",
            false
        ));
        assert!(!wildcard_match(
            "https://*.example.com",
            "https://example.com",
            false
        ));
        assert!(!wildcard_match(
            "https://*.example.com",
            "http://a.example.com",
            false
        ));
        assert!(wildcard_match("x-amz-*", "X-Amz-Date", true));
        assert!(!wildcard_match("x-amz-*", "X-Amz-Date", false));
        assert!(wildcard_match("exact", "exact", false));
        assert!(!wildcard_match("ab*ba", "aba", false));
    }

    #[test]
    fn rule_matching() {
        let c = CorsConfig::parse(DOC.as_bytes()).unwrap();
        let o = "https://app.example.com";
        let r = c
            .find_rule(o, "PUT", &["x-amz-date", "content-type"])
            .unwrap();
        assert_eq!(r.id.as_deref(), Some("web"));
        // A header the first rule does not allow, and the second rule does not allow PUT.
        assert!(c.find_rule(o, "PUT", &["authorization"]).is_none());
        // Any origin may GET without headers, through the second rule.
        let r = c.find_rule("https://other.org", "GET", &[]).unwrap();
        assert!(r.any_origin());
        assert!(c.find_rule("https://other.org", "DELETE", &[]).is_none());
        // Methods match exactly.
        assert!(c.find_rule(o, "get", &[]).is_none());
    }

    #[test]
    fn response_headers() {
        let c = CorsConfig::parse(DOC.as_bytes()).unwrap();
        let mut h = HeaderMap::new();
        c.rules[0].common_headers("https://app.example.com", &mut h);
        assert_eq!(h["access-control-allow-origin"], "https://app.example.com");
        assert_eq!(h["access-control-allow-credentials"], "true");
        assert_eq!(h["access-control-allow-methods"], "GET, PUT");
        assert_eq!(h["access-control-expose-headers"], "ETag");
        assert_eq!(h["access-control-max-age"], "3000");
        assert!(h["vary"].to_str().unwrap().starts_with("Origin"));
        let mut h = HeaderMap::new();
        c.rules[1].common_headers("https://other.org", &mut h);
        assert_eq!(h["access-control-allow-origin"], "*");
        assert!(!h.contains_key("access-control-allow-credentials"));
    }
}
