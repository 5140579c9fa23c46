//! Authorization cost: a user with ten attached policies (three statements each: a bucket-scoped
//! allow with a policy variable, a list allow with a `StringLike` on `s3:prefix`, a deny with
//! `Bool` + `NotIpAddress`) and a bucket policy, deciding a GetObject that only the last policy
//! allows (every statement is looked at); the same with the condition context built per request
//! as the front end does; beside one HMAC-SHA256 of 256 bytes (a SigV4 verification is about six).
//!
//! Run: `cargo bench -p quarry-benches --bench policy`. Issue 19's target: under 5 µs.

use criterion::{criterion_group, criterion_main, Criterion};
use hmac::{Hmac, Mac};
use quarry_policy::{evaluate, Context, Decision, Policy, Principal, Request};
use sha2::Sha256;

fn policies() -> (Vec<Policy>, Policy) {
    let ids = (0..10)
        .map(|i| {
            Policy::parse_identity(&format!(
                r#"{{"Version":"2012-10-17","Statement":[
                {{"Sid":"Rw{i}","Effect":"Allow","Action":["s3:GetObject","s3:PutObject","s3:DeleteObject"],
                  "Resource":"arn:aws:s3:::bucket{i}/${{aws:username}}/*"}},
                {{"Sid":"List{i}","Effect":"Allow","Action":"s3:ListBucket","Resource":"arn:aws:s3:::bucket{i}",
                  "Condition":{{"StringLike":{{"s3:prefix":["","${{aws:username}}/*"]}}}}}},
                {{"Sid":"Net{i}","Effect":"Deny","Action":"s3:*","Resource":"*",
                  "Condition":{{"Bool":{{"aws:SecureTransport":"false"}},"NotIpAddress":{{"aws:SourceIp":["10.{i}.0.0/16","127.0.0.0/8"]}}}}}}]}}"#
            ))
            .unwrap()
        })
        .collect();
    let bucket = Policy::parse_resource(
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::site/*"}]}"#,
    )
    .unwrap();
    (ids, bucket)
}

fn context() -> Context {
    let mut ctx = Context::default();
    ctx.set("aws:username", "alice");
    ctx.set("aws:userid", "AKIAALICE");
    ctx.set("aws:SourceIp", "127.0.0.1");
    ctx.set("aws:SecureTransport", "false");
    ctx.set("aws:CurrentTime", "2026-12-02T08:00:00Z");
    ctx.set("aws:EpochTime", "1796198400");
    ctx
}

fn bench(c: &mut Criterion) {
    let (ids, bucket) = policies();
    let ids: Vec<&Policy> = ids.iter().collect();
    let principal = Principal {
        anonymous: false,
        ids: vec![
            "arn:aws:iam::000000000000:user/alice".into(),
            "000000000000".into(),
        ],
    };
    let ctx = context();
    let req = Request {
        action: "s3:GetObject",
        resource: "arn:aws:s3:::bucket9/alice/photos/2026/cat.jpg",
        principal: &principal,
        context: &ctx,
    };
    assert_eq!(evaluate(&ids, &[&bucket], &req), Decision::Allow);
    let mut g = c.benchmark_group("policy");
    g.bench_function("evaluate_10_policies", |b| {
        b.iter(|| {
            evaluate(
                std::hint::black_box(&ids),
                &[&bucket],
                std::hint::black_box(&req),
            )
        })
    });
    g.bench_function("context_and_evaluate_10_policies", |b| {
        b.iter(|| {
            let ctx = context();
            let req = Request {
                context: &ctx,
                ..req
            };
            evaluate(
                std::hint::black_box(&ids),
                &[&bucket],
                std::hint::black_box(&req),
            )
        })
    });
    let key = [7u8; 32];
    let msg = [1u8; 256];
    g.bench_function("baseline_hmac_sha256_256B", |b| {
        b.iter(|| {
            let mut m = Hmac::<Sha256>::new_from_slice(&key).unwrap();
            m.update(std::hint::black_box(&msg));
            m.finalize().into_bytes()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
