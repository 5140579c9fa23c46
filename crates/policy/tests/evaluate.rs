//! Evaluation as AWS defines it, on the policies people write.

use quarry_policy::{evaluate, Context, Decision, Policy, Principal, Request};

fn identity(json: &str) -> Policy {
    Policy::parse_identity(json).unwrap()
}

fn bucket(json: &str) -> Policy {
    Policy::parse_resource(json).unwrap()
}

fn user(name: &str) -> Principal {
    Principal {
        anonymous: false,
        ids: vec![
            format!("arn:aws:iam::000000000000:user/{name}"),
            "000000000000".into(),
        ],
    }
}

fn decide(
    ids: &[&Policy],
    res: &[&Policy],
    action: &str,
    resource: &str,
    who: &Principal,
    ctx: &Context,
) -> Decision {
    evaluate(
        ids,
        res,
        &Request {
            action,
            resource,
            principal: who,
            context: ctx,
        },
    )
}

#[test]
fn deny_wins_then_allow_else_implicit_deny() {
    let read = identity(
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:Get*","s3:ListBucket"],"Resource":["arn:aws:s3:::photos","arn:aws:s3:::photos/*"]}]}"#,
    );
    let no_secret = identity(
        r#"{"Version":"2012-10-17","Statement":{"Effect":"Deny","Action":"s3:*","Resource":"arn:aws:s3:::photos/secret/*"}}"#,
    );
    let alice = user("alice");
    let ctx = Context::default();
    let d = |ps: &[&Policy], a, r| decide(ps, &[], a, r, &alice, &ctx);
    assert_eq!(
        d(&[&read], "s3:GetObject", "arn:aws:s3:::photos/a.jpg"),
        Decision::Allow
    );
    // Actions are case-insensitive, resources are not.
    assert_eq!(
        d(&[&read], "S3:getobject", "arn:aws:s3:::photos/a.jpg"),
        Decision::Allow
    );
    assert_eq!(
        d(&[&read], "s3:GetObject", "arn:aws:s3:::Photos/a.jpg"),
        Decision::ImplicitDeny
    );
    assert_eq!(
        d(&[&read], "s3:PutObject", "arn:aws:s3:::photos/a.jpg"),
        Decision::ImplicitDeny
    );
    assert_eq!(
        d(&[&read], "s3:ListBucket", "arn:aws:s3:::photos"),
        Decision::Allow
    );
    assert_eq!(
        d(
            &[&read, &no_secret],
            "s3:GetObject",
            "arn:aws:s3:::photos/secret/x"
        ),
        Decision::ExplicitDeny
    );
    assert_eq!(
        d(
            &[&no_secret, &read],
            "s3:GetObject",
            "arn:aws:s3:::photos/secret/x"
        ),
        Decision::ExplicitDeny
    );
    assert_eq!(
        d(&[], "s3:GetObject", "arn:aws:s3:::photos/a.jpg"),
        Decision::ImplicitDeny
    );
}

#[test]
fn not_action_and_not_resource() {
    let p = identity(
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","NotAction":"s3:Delete*","NotResource":"arn:aws:s3:::logs/*"}]}"#,
    );
    let alice = user("alice");
    let ctx = Context::default();
    assert_eq!(
        decide(&[&p], &[], "s3:PutObject", "arn:aws:s3:::b/k", &alice, &ctx),
        Decision::Allow
    );
    assert_eq!(
        decide(
            &[&p],
            &[],
            "s3:DeleteObject",
            "arn:aws:s3:::b/k",
            &alice,
            &ctx
        ),
        Decision::ImplicitDeny
    );
    assert_eq!(
        decide(
            &[&p],
            &[],
            "s3:PutObject",
            "arn:aws:s3:::logs/k",
            &alice,
            &ctx
        ),
        Decision::ImplicitDeny
    );
}

#[test]
fn bucket_policies_apply_through_their_principal() {
    let public = bucket(
        r#"{"Version":"2012-10-17","Statement":[{"Sid":"Public","Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::site/*"}]}"#,
    );
    let for_bob = bucket(
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::000000000000:user/bob"},"Action":"s3:PutObject","Resource":"arn:aws:s3:::site/*"}]}"#,
    );
    let anon = Principal {
        anonymous: true,
        ids: vec![],
    };
    let ctx = Context::default();
    let (alice, bob) = (user("alice"), user("bob"));
    assert_eq!(
        decide(
            &[],
            &[&public],
            "s3:GetObject",
            "arn:aws:s3:::site/i.html",
            &anon,
            &ctx
        ),
        Decision::Allow
    );
    assert_eq!(
        decide(
            &[],
            &[&public],
            "s3:PutObject",
            "arn:aws:s3:::site/i.html",
            &anon,
            &ctx
        ),
        Decision::ImplicitDeny
    );
    assert_eq!(
        decide(
            &[],
            &[&for_bob],
            "s3:PutObject",
            "arn:aws:s3:::site/x",
            &bob,
            &ctx
        ),
        Decision::Allow
    );
    assert_eq!(
        decide(
            &[],
            &[&for_bob],
            "s3:PutObject",
            "arn:aws:s3:::site/x",
            &alice,
            &ctx
        ),
        Decision::ImplicitDeny
    );
    assert_eq!(
        decide(
            &[],
            &[&for_bob],
            "s3:PutObject",
            "arn:aws:s3:::site/x",
            &anon,
            &ctx
        ),
        Decision::ImplicitDeny
    );
    // A bucket policy's deny beats an identity allow.
    let admin = identity(
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}"#,
    );
    let deny_all_but_bob = bucket(
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","NotPrincipal":{"AWS":"arn:aws:iam::000000000000:user/bob"},"Action":"s3:*","Resource":"arn:aws:s3:::site/*"}]}"#,
    );
    assert_eq!(
        decide(
            &[&admin],
            &[&deny_all_but_bob],
            "s3:GetObject",
            "arn:aws:s3:::site/x",
            &alice,
            &ctx
        ),
        Decision::ExplicitDeny
    );
    assert_eq!(
        decide(
            &[&admin],
            &[&deny_all_but_bob],
            "s3:GetObject",
            "arn:aws:s3:::site/x",
            &bob,
            &ctx
        ),
        Decision::Allow
    );
    assert_eq!(
        decide(
            &[],
            &[&deny_all_but_bob],
            "s3:GetObject",
            "arn:aws:s3:::site/x",
            &anon,
            &ctx
        ),
        Decision::ExplicitDeny
    );
}

#[test]
fn home_directories_with_variables_and_conditions() {
    let home = identity(
        r#"{"Version":"2012-10-17","Statement":[
          {"Effect":"Allow","Action":"s3:ListBucket","Resource":"arn:aws:s3:::home",
           "Condition":{"StringLike":{"s3:prefix":["","${aws:username}/*"]}}},
          {"Effect":"Allow","Action":["s3:GetObject","s3:PutObject"],"Resource":"arn:aws:s3:::home/${aws:username}/*"},
          {"Effect":"Deny","Action":"s3:*","Resource":"*","Condition":{"Bool":{"aws:SecureTransport":"false"},"NotIpAddress":{"aws:SourceIp":"127.0.0.0/8"}}}]}"#,
    );
    let alice = user("alice");
    let mut ctx = Context::default();
    ctx.set("aws:username", "alice");
    ctx.set("aws:SecureTransport", "false");
    ctx.set("aws:SourceIp", "127.0.0.1");
    let d = |a, r, ctx: &Context| decide(&[&home], &[], a, r, &alice, ctx);
    assert_eq!(
        d("s3:PutObject", "arn:aws:s3:::home/alice/notes", &ctx),
        Decision::Allow
    );
    assert_eq!(
        d("s3:PutObject", "arn:aws:s3:::home/bob/notes", &ctx),
        Decision::ImplicitDeny
    );
    let mut list = ctx.clone();
    list.set("s3:prefix", "alice/");
    assert_eq!(
        d("s3:ListBucket", "arn:aws:s3:::home", &list),
        Decision::Allow
    );
    list.set("s3:prefix", "bob/");
    assert_eq!(
        d("s3:ListBucket", "arn:aws:s3:::home", &list),
        Decision::ImplicitDeny
    );
    // No prefix at all: StringLike on a missing key is false.
    assert_eq!(
        d("s3:ListBucket", "arn:aws:s3:::home", &ctx),
        Decision::ImplicitDeny
    );
    // Plain HTTP from elsewhere is denied, whatever else allows it.
    let mut far = ctx.clone();
    far.set("aws:SourceIp", "192.0.2.1");
    assert_eq!(
        d("s3:PutObject", "arn:aws:s3:::home/alice/notes", &far),
        Decision::ExplicitDeny
    );
    far.set("aws:SecureTransport", "true");
    assert_eq!(
        d("s3:PutObject", "arn:aws:s3:::home/alice/notes", &far),
        Decision::Allow
    );
    // Without a user name (e.g. a root or anonymous caller) the variable matches nothing.
    let mut nobody = ctx.clone();
    nobody.set("aws:username", "alice");
    let no_name = Context::default();
    assert_eq!(
        d("s3:PutObject", "arn:aws:s3:::home/alice/notes", &no_name),
        Decision::ImplicitDeny
    );
}

#[test]
fn version_2008_has_no_variables() {
    let p = identity(
        r#"{"Version":"2008-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/${aws:username}"}]}"#,
    );
    let mut ctx = Context::default();
    ctx.set("aws:username", "alice");
    let alice = user("alice");
    assert_eq!(
        decide(
            &[&p],
            &[],
            "s3:GetObject",
            "arn:aws:s3:::b/alice",
            &alice,
            &ctx
        ),
        Decision::ImplicitDeny
    );
    assert_eq!(
        decide(
            &[&p],
            &[],
            "s3:GetObject",
            "arn:aws:s3:::b/${aws:username}",
            &alice,
            &ctx
        ),
        Decision::Allow
    );
}

#[test]
fn condition_keys_and_variables_are_case_insensitive_whatever_case_each_side_uses() {
    // The context stores keys in one case and the compiled policy looks them up in that case:
    // a key written `AWS:SOURCEIP` in the policy still finds `aws:SourceIp` of the request, and
    // `${AWS:UserName}` the request's `aws:username`.
    let p = identity(
        r#"{"Version":"2012-10-17","Statement":[
            {"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::home/${AWS:UserName}/*",
             "Condition":{"IpAddress":{"AWS:SOURCEIP":"192.0.2.0/24"},"Bool":{"aws:securetransport":"TRUE"}}}]}"#,
    );
    let alice = user("alice");
    let mut ctx = Context::default();
    ctx.set("Aws:Username", "alice");
    ctx.insert("aws:SourceIp", "192.0.2.9");
    ctx.set("aws:SecureTransport", "true");
    let d = |ctx: &Context, r| decide(&[&p], &[], "s3:GetObject", r, &alice, ctx);
    assert_eq!(d(&ctx, "arn:aws:s3:::home/alice/a"), Decision::Allow);
    assert_eq!(d(&ctx, "arn:aws:s3:::home/bob/a"), Decision::ImplicitDeny);
    assert_eq!(
        ctx.get("AWS:SOURCEIP"),
        Some(&["192.0.2.9".to_string()][..])
    );
    let mut outside = ctx.clone();
    outside.set("AWS:SourceIP", "198.51.100.1");
    assert_eq!(
        d(&outside, "arn:aws:s3:::home/alice/a"),
        Decision::ImplicitDeny
    );
    let mut plain = ctx.clone();
    plain.set("aws:securetransport", "False");
    assert_eq!(
        d(&plain, "arn:aws:s3:::home/alice/a"),
        Decision::ImplicitDeny
    );
}
