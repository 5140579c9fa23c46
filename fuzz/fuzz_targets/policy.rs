//! IAM policy documents (bucket policies arrive from any authenticated client): no panic, and a
//! document that parses evaluates without panicking against a request that uses every kind of
//! condition key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_policy::{evaluate, Context, Policy, Principal, Request};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut ctx = Context::default();
    for (k, v) in [
        ("aws:username", "alice"),
        ("aws:SourceIp", "192.0.2.1"),
        ("aws:SecureTransport", "true"),
        ("aws:CurrentTime", "2026-12-02T08:00:00Z"),
        ("s3:prefix", "a/b"),
        ("s3:max-keys", "100"),
    ] {
        ctx.set(k, v);
    }
    let principal = Principal {
        anonymous: false,
        ids: vec!["arn:aws:iam::1:user/alice".into()],
    };
    let req = Request {
        action: "s3:GetObject",
        resource: "arn:aws:s3:::b/k",
        principal: &principal,
        context: &ctx,
    };
    if let Ok(p) = Policy::parse_identity(text) {
        let _ = evaluate(&[&p], &[], &req);
    }
    if let Ok(p) = Policy::parse_resource(text) {
        let _ = evaluate(&[], &[&p], &req);
    }
});
