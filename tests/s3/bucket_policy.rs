//! Bucket policies (Put/Get/DeleteBucketPolicy, GetBucketPolicyStatus) and what they allow:
//! anonymous (unsigned) requests exactly where a policy grants `Principal: "*"`, grants and
//! denials for IAM users beside their own policies, conditions on the source address, the
//! listing prefix and the transport; the root user is never locked out. Every refusal is beside
//! a control request that passes.

use quarry_integration::*;

use crate::iam::{call, denied, get, list, ok, put, user_with_key, ROOT};

/// An unsigned request (no Authorization header, no presigned query): status and body.
async fn anon(srv: &TestServer, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let url = format!("{}{path}", srv.endpoint());
    let r = send_raw(method, &url, &[], body.to_vec()).await;
    (r.status().as_u16(), r.text().await.unwrap())
}

#[track_caller]
fn anon_denied(r: &(u16, String)) {
    assert_eq!(r.0, 403, "{}", r.1);
    assert!(r.1.contains("<Code>AccessDenied</Code>"), "{}", r.1);
}

async fn put_policy(c: &aws_sdk_s3::Client, bucket: &str, doc: &str) -> Result<(), String> {
    c.put_bucket_policy()
        .bucket(bucket)
        .policy(doc)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| error_code(&e).unwrap_or_else(|| describe(&e)))
}

fn policy(statements: &str) -> String {
    format!(r#"{{"Version":"2012-10-17","Statement":[{statements}]}}"#)
}

async fn attach_inline(srv: &TestServer, user: &str, doc: &str) {
    ok(&call(
        srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "PutUserPolicy"),
            ("UserName", user),
            ("PolicyName", "p"),
            ("PolicyDocument", doc),
        ],
    )
    .await);
}

#[tokio::test]
async fn bucket_policies_grant_deny_and_open_buckets_to_anonymous_readers() {
    let srv = TestServer::start(4).await;
    let root = srv.client();
    for b in ["pub", "priv"] {
        srv.create_bucket(b).await;
        for k in ["a.txt", "public/x", "ip/x", "locked/x"] {
            put(&root, b, k).await.unwrap();
        }
    }

    // No policy yet: the Get calls say so; anonymous readers are refused, the root reads.
    let e = root
        .get_bucket_policy()
        .bucket("pub")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("NoSuchBucketPolicy"));
    let e = root
        .get_bucket_policy_status()
        .bucket("pub")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("NoSuchBucketPolicy"));
    anon_denied(&anon(&srv, "GET", "/pub/a.txt", b"").await);
    get(&root, "pub", "a.txt").await.unwrap();

    // Refused documents: no principal, another bucket's resource, a non-S3 action, not JSON.
    for bad in [
        policy(r#"{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::pub/*"}"#),
        policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::priv/*"}"#,
        ),
        policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"iam:GetUser","Resource":"arn:aws:s3:::pub"}"#,
        ),
        "{not json".to_owned(),
    ] {
        assert_eq!(
            put_policy(&root, "pub", &bad).await,
            Err("MalformedPolicy".to_owned()),
            "{bad}"
        );
    }
    anon_denied(&anon(&srv, "GET", "/pub/a.txt", b"").await);

    // Public read of objects, a prefix-limited public listing, a read allowed only from a
    // network the test is not in.
    let public = policy(
        r#"{"Sid":"read","Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":["arn:aws:s3:::pub/a.txt","arn:aws:s3:::pub/public/*"]},
           {"Sid":"list","Effect":"Allow","Principal":{"AWS":"*"},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::pub",
            "Condition":{"StringLike":{"s3:prefix":"public/*"}}},
           {"Sid":"ip","Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pub/ip/*",
            "Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}"#,
    );
    put_policy(&root, "pub", &public).await.unwrap();
    let got = root.get_bucket_policy().bucket("pub").send().await.unwrap();
    assert_eq!(got.policy(), Some(public.as_str()), "returned as stored");
    let status = root
        .get_bucket_policy_status()
        .bucket("pub")
        .send()
        .await
        .unwrap();
    assert_eq!(
        status.policy_status().and_then(|s| s.is_public()),
        Some(true)
    );

    let r = anon(&srv, "GET", "/pub/a.txt", b"").await;
    assert_eq!(r, (200, "data".to_owned()));
    let r = anon(&srv, "GET", "/pub/public/x", b"").await;
    assert_eq!(r.0, 200, "{}", r.1);
    // Not granted: other keys, writes, deletes, the other bucket, the policy itself.
    anon_denied(&anon(&srv, "GET", "/pub/locked/x", b"").await);
    anon_denied(&anon(&srv, "PUT", "/pub/new", b"x").await);
    anon_denied(&anon(&srv, "DELETE", "/pub/a.txt", b"").await);
    anon_denied(&anon(&srv, "GET", "/priv/a.txt", b"").await);
    anon_denied(&anon(&srv, "GET", "/pub?policy", b"").await);
    anon_denied(&anon(&srv, "GET", "/", b"").await);
    get(&root, "pub", "a.txt").await.unwrap();
    // s3:prefix: listing under public/ is allowed, the whole bucket is not.
    let r = anon(&srv, "GET", "/pub?list-type=2&prefix=public/", b"").await;
    assert_eq!(r.0, 200, "{}", r.1);
    assert!(r.1.contains("<Key>public/x</Key>"), "{}", r.1);
    anon_denied(&anon(&srv, "GET", "/pub?list-type=2", b"").await);
    anon_denied(&anon(&srv, "GET", "/pub?list-type=2&prefix=ip/", b"").await);
    // aws:SourceIp: 10.0.0.0/8 does not hold 127.0.0.1; 127.0.0.0/8 does.
    anon_denied(&anon(&srv, "GET", "/pub/ip/x", b"").await);
    put_policy(&root, "pub", &public.replace("10.0.0.0/8", "127.0.0.0/8"))
        .await
        .unwrap();
    let r = anon(&srv, "GET", "/pub/ip/x", b"").await;
    assert_eq!(r.0, 200, "{}", r.1);

    // Users: bob has no identity policy; the bucket policy grants him reads of pub only.
    let (bk, bs) = user_with_key(&srv, "bob").await;
    let bob = srv.client_with(&bk, &bs);
    let r = call(
        &srv,
        0,
        ROOT,
        "iam",
        &[("Action", "GetUser"), ("UserName", "bob")],
    )
    .await;
    ok(&r);
    let bob_arn = crate::iam::elem(&r.1, "Arn").to_owned();
    assert_eq!(bob_arn, "arn:aws:iam::000000000000:user/bob");
    denied(get(&bob, "pub", "locked/x").await);
    let grant_bob = format!(
        r#"{{"Effect":"Allow","Principal":{{"AWS":"{bob_arn}"}},"Action":"s3:GetObject","Resource":"arn:aws:s3:::pub/*"}}"#
    );
    put_policy(&root, "pub", &policy(&grant_bob)).await.unwrap();
    get(&bob, "pub", "locked/x").await.unwrap();
    denied(put(&bob, "pub", "bob-was-here").await);
    denied(get(&bob, "priv", "a.txt").await);
    // ...and not anyone: the anonymous grant went with the old policy.
    anon_denied(&anon(&srv, "GET", "/pub/a.txt", b"").await);
    // A user may not change a bucket policy without s3:PutBucketPolicy.
    assert_eq!(
        put_policy(&bob, "pub", &public).await,
        Err("AccessDenied".to_owned())
    );

    // alice may do anything in both buckets by her own policy; a Deny for her in the bucket
    // policy wins over that allow, for the keys it names only.
    let (ak, asec) = user_with_key(&srv, "alice").await;
    let alice = srv.client_with(&ak, &asec);
    attach_inline(
        &srv,
        "alice",
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":["arn:aws:s3:::pub","arn:aws:s3:::pub/*","arn:aws:s3:::priv","arn:aws:s3:::priv/*"]}]}"#,
    )
    .await;
    let alice_arn = bob_arn.replace("user/bob", "user/alice");
    put(&alice, "pub", "locked/y").await.unwrap();
    let deny_alice = format!(
        r#"{{"Effect":"Deny","Principal":{{"AWS":"{alice_arn}"}},"Action":"s3:PutObject","Resource":"arn:aws:s3:::pub/locked/*"}}"#
    );
    put_policy(&root, "pub", &policy(&format!("{grant_bob},{deny_alice}")))
        .await
        .unwrap();
    denied(put(&alice, "pub", "locked/y").await);
    put(&alice, "pub", "open/y").await.unwrap();
    get(&alice, "pub", "locked/x").await.unwrap();
    get(&bob, "pub", "locked/x").await.unwrap();

    // aws:SecureTransport: deny everyone every request to priv over plain HTTP. alice is
    // refused, even her own policy's allow; the root user is not locked out and can remove it.
    let https_only = policy(
        r#"{"Effect":"Deny","Principal":"*","Action":"s3:*","Resource":["arn:aws:s3:::priv","arn:aws:s3:::priv/*"],
            "Condition":{"Bool":{"aws:SecureTransport":"false"}}}"#,
    );
    list(&alice, "priv", "").await.unwrap();
    put_policy(&root, "priv", &https_only).await.unwrap();
    denied(list(&alice, "priv", "").await);
    denied(get(&alice, "priv", "a.txt").await);
    get(&alice, "pub", "a.txt").await.unwrap();
    let status = root
        .get_bucket_policy_status()
        .bucket("priv")
        .send()
        .await
        .unwrap();
    assert_eq!(
        status.policy_status().and_then(|s| s.is_public()),
        Some(false)
    );
    get(&root, "priv", "a.txt").await.unwrap();
    let e = alice
        .delete_bucket_policy()
        .bucket("priv")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("AccessDenied"));
    root.delete_bucket_policy()
        .bucket("priv")
        .send()
        .await
        .unwrap();
    list(&alice, "priv", "").await.unwrap();
    let e = root
        .get_bucket_policy()
        .bucket("priv")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("NoSuchBucketPolicy"));

    // A deleted bucket takes its policy with it: a new bucket of the name starts private.
    put_policy(
        &root,
        "priv",
        &public.replace("arn:aws:s3:::pub", "arn:aws:s3:::priv"),
    )
    .await
    .unwrap();
    let r = anon(&srv, "GET", "/priv/a.txt", b"").await;
    assert_eq!(r.0, 200, "{}", r.1);
    for k in ["a.txt", "public/x", "ip/x", "locked/x"] {
        root.delete_object()
            .bucket("priv")
            .key(k)
            .send()
            .await
            .unwrap();
    }
    root.delete_bucket().bucket("priv").send().await.unwrap();
    srv.create_bucket("priv").await;
    put(&root, "priv", "a.txt").await.unwrap();
    anon_denied(&anon(&srv, "GET", "/priv/a.txt", b"").await);
    let e = root
        .get_bucket_policy()
        .bucket("priv")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("NoSuchBucketPolicy"));
}

async fn tag(c: &aws_sdk_s3::Client, bucket: &str, key: &str, k: &str, v: &str) {
    use aws_sdk_s3::types::{Tag, Tagging};
    c.put_object_tagging()
        .bucket(bucket)
        .key(key)
        .tagging(
            Tagging::builder()
                .tag_set(Tag::builder().key(k).value(v).build().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("put object tagging");
}

/// `s3:ExistingObjectTag/<key>`: the tags an object has when the request comes, in bucket
/// policies (an allow for one tag value, a deny for another) and identity policies alike; a
/// changed tag changes the next decision. Every refusal beside a request that passes.
#[tokio::test]
async fn existing_object_tags_decide_reads_in_bucket_and_identity_policies() {
    let srv = TestServer::start(4).await;
    let root = srv.client();
    srv.create_bucket("tagged").await;
    for k in ["open", "closed", "plain"] {
        put(&root, "tagged", k).await.unwrap();
    }
    tag(&root, "tagged", "open", "class", "public").await;
    tag(&root, "tagged", "closed", "class", "secret").await;

    let (bk, bs) = user_with_key(&srv, "bob").await;
    let bob = srv.client_with(&bk, &bs);
    let (ak, asec) = user_with_key(&srv, "alice").await;
    let alice = srv.client_with(&ak, &asec);
    attach_inline(
        &srv,
        "alice",
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":["arn:aws:s3:::tagged","arn:aws:s3:::tagged/*"]}]}"#,
    )
    .await;
    let (ck, cs) = user_with_key(&srv, "carol").await;
    let carol = srv.client_with(&ck, &cs);
    attach_inline(
        &srv,
        "carol",
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::tagged/*",
            "Condition":{"StringEquals":{"s3:ExistingObjectTag/class":"public"}}}]}"#,
    )
    .await;
    let arn = |u: &str| format!("arn:aws:iam::000000000000:user/{u}");
    put_policy(
        &root,
        "tagged",
        &policy(&format!(
            r#"{{"Effect":"Allow","Principal":{{"AWS":"{}"}},"Action":"s3:GetObject","Resource":"arn:aws:s3:::tagged/*",
                "Condition":{{"StringEquals":{{"s3:ExistingObjectTag/class":"public"}}}}}},
               {{"Effect":"Deny","Principal":{{"AWS":"{}"}},"Action":["s3:GetObject","s3:GetObjectTagging"],"Resource":"arn:aws:s3:::tagged/*",
                "Condition":{{"StringEquals":{{"s3:ExistingObjectTag/class":"secret"}}}}}}"#,
            arn("bob"),
            arn("alice")
        )),
    )
    .await
    .unwrap();

    // bob: only what the bucket policy's tag condition allows.
    get(&bob, "tagged", "open").await.unwrap();
    denied(get(&bob, "tagged", "closed").await);
    denied(get(&bob, "tagged", "plain").await);
    // alice: everything by her own policy but what the bucket policy's deny names.
    get(&alice, "tagged", "open").await.unwrap();
    get(&alice, "tagged", "plain").await.unwrap();
    denied(get(&alice, "tagged", "closed").await);
    let e = alice
        .get_object_tagging()
        .bucket("tagged")
        .key("closed")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("AccessDenied"));
    alice
        .get_object_tagging()
        .bucket("tagged")
        .key("open")
        .send()
        .await
        .expect("alice reads the tags of an object the deny does not name");
    // carol: the same condition in her identity policy.
    get(&carol, "tagged", "open").await.unwrap();
    denied(get(&carol, "tagged", "closed").await);

    // The tag changes: the next decisions follow it.
    tag(&root, "tagged", "closed", "class", "public").await;
    get(&bob, "tagged", "closed").await.unwrap();
    get(&carol, "tagged", "closed").await.unwrap();
    get(&alice, "tagged", "closed").await.unwrap();
    tag(&root, "tagged", "open", "class", "secret").await;
    denied(get(&bob, "tagged", "open").await);
    denied(get(&alice, "tagged", "open").await);
    // The root user is never refused.
    get(&root, "tagged", "open").await.unwrap();
}
