//! ACLs, ObjectOwnership and the public access block, in AWS's model: canned ACLs and grant
//! headers on the writes that create buckets and objects, Put/Get(Bucket|Object)Acl, grants as
//! one more source of Allow (to anonymous callers through AllUsers, to IAM users through
//! AuthenticatedUsers or their user id), an explicit deny in a policy still winning,
//! BucketOwnerEnforced (the default) turning ACLs off, and the four public access block settings.
//! Every refusal is beside a control request that passes.

use aws_sdk_s3::types::{
    BucketCannedAcl, ObjectCannedAcl, ObjectOwnership, OwnershipControls, OwnershipControlsRule,
    PublicAccessBlockConfiguration,
};
use quarry_integration::*;

use crate::iam::{call, denied, elem, get, ok, put, user_with_key, ROOT};

/// An unsigned request: its status.
async fn anon(srv: &TestServer, method: &str, path: &str, body: &[u8]) -> u16 {
    let url = format!("{}{path}", srv.endpoint());
    send_raw(method, &url, &[], body.to_vec())
        .await
        .status()
        .as_u16()
}

fn code<T, E: aws_sdk_s3::error::ProvideErrorMetadata, R>(
    r: Result<T, aws_sdk_s3::error::SdkError<E, R>>,
) -> Option<String> {
    r.err().map(|e| error_code(&e).unwrap_or_default())
}

async fn get_user(srv: &TestServer, name: &str, field: &str) -> String {
    let r = call(
        srv,
        0,
        ROOT,
        "iam",
        &[("Action", "GetUser"), ("UserName", name)],
    )
    .await;
    ok(&r);
    elem(&r.1, field).to_owned()
}

async fn user_id(srv: &TestServer, name: &str) -> String {
    get_user(srv, name, "UserId").await
}

async fn user_arn(srv: &TestServer, name: &str) -> String {
    get_user(srv, name, "Arn").await
}

/// A bucket with ACLs on (ObjectWriter), made by the root user.
async fn acl_bucket(c: &aws_sdk_s3::Client, bucket: &str, acl: Option<BucketCannedAcl>) {
    c.create_bucket()
        .bucket(bucket)
        .object_ownership(ObjectOwnership::ObjectWriter)
        .set_acl(acl)
        .send()
        .await
        .expect("create bucket with ObjectWriter");
}

async fn put_with_acl(
    c: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    acl: ObjectCannedAcl,
) -> Option<String> {
    code(
        c.put_object()
            .bucket(bucket)
            .key(key)
            .acl(acl)
            .body(b"data".to_vec().into())
            .send()
            .await,
    )
}

#[tokio::test]
async fn canned_acls_and_grants_allow_and_a_policy_deny_still_wins() {
    let srv = TestServer::start(4).await;
    let root = srv.client();
    let (ak, sk) = user_with_key(&srv, "alice").await;
    let alice = srv.client_with(&ak, &sk);
    let (bk, bs) = user_with_key(&srv, "bob").await;
    let bob = srv.client_with(&bk, &bs);
    let bob_id = user_id(&srv, "bob").await;

    // A public-read bucket: anyone lists it; its objects stay private unless their ACL says.
    acl_bucket(&root, "acls", Some(BucketCannedAcl::PublicRead)).await;
    put(&root, "acls", "private").await.unwrap();
    assert_eq!(
        put_with_acl(&root, "acls", "public", ObjectCannedAcl::PublicRead).await,
        None
    );
    assert_eq!(anon(&srv, "GET", "/acls?list-type=2", b"").await, 200);
    assert_eq!(anon(&srv, "GET", "/acls/public", b"").await, 200);
    assert_eq!(anon(&srv, "GET", "/acls/private", b"").await, 403);
    // READ on the bucket is not WRITE.
    assert_eq!(anon(&srv, "PUT", "/acls/new", b"x").await, 403);
    // An IAM user without any policy: the same grants as everyone, no more.
    get(&alice, "acls", "public").await.unwrap();
    denied(get(&alice, "acls", "private").await);

    // authenticated-read: signed callers only.
    assert_eq!(
        put_with_acl(&root, "acls", "members", ObjectCannedAcl::AuthenticatedRead).await,
        None
    );
    assert_eq!(anon(&srv, "GET", "/acls/members", b"").await, 403);
    get(&alice, "acls", "members").await.unwrap();

    // A grant to one user by its user id (what GetUser answers), through PutObjectAcl's header.
    root.put_object_acl()
        .bucket("acls")
        .key("private")
        .grant_read(format!("id={bob_id}"))
        .send()
        .await
        .expect("grant bob read");
    get(&bob, "acls", "private").await.unwrap();
    denied(get(&alice, "acls", "private").await);
    let acl = root
        .get_object_acl()
        .bucket("acls")
        .key("private")
        .send()
        .await
        .unwrap();
    let ids: Vec<_> = acl
        .grants()
        .iter()
        .filter_map(|g| g.grantee().and_then(|e| e.id()))
        .collect();
    assert_eq!(ids, vec![bob_id.as_str()]);
    let acl = root
        .get_object_acl()
        .bucket("acls")
        .key("public")
        .send()
        .await
        .unwrap();
    assert!(
        acl.grants().iter().any(|g| g
            .grantee()
            .and_then(|e| e.uri())
            .is_some_and(|u| u.ends_with("/AllUsers"))),
        "{acl:?}"
    );

    // An explicit deny in the bucket policy wins over the ACL; the control user still reads.
    let alice_arn = user_arn(&srv, "alice").await;
    let deny = format!(
        r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Deny","Principal":{{"AWS":"{alice_arn}"}},"Action":"s3:GetObject","Resource":"arn:aws:s3:::acls/*"}}]}}"#
    );
    root.put_bucket_policy()
        .bucket("acls")
        .policy(deny)
        .send()
        .await
        .expect("deny policy");
    denied(get(&alice, "acls", "members").await);
    get(&bob, "acls", "members").await.unwrap();
    root.delete_bucket_policy()
        .bucket("acls")
        .send()
        .await
        .unwrap();

    // public-read-write on the bucket: anonymous writes; a grant by e-mail is AWS's error.
    root.put_bucket_acl()
        .bucket("acls")
        .acl(BucketCannedAcl::PublicReadWrite)
        .send()
        .await
        .expect("public-read-write");
    assert_eq!(anon(&srv, "PUT", "/acls/new", b"x").await, 200);
    assert_eq!(
        code(
            root.put_bucket_acl()
                .bucket("acls")
                .grant_read("emailAddress=a@example.com")
                .send()
                .await
        )
        .as_deref(),
        Some("UnresolvableGrantByEmailAddress")
    );
    root.put_bucket_acl()
        .bucket("acls")
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .unwrap();
    assert_eq!(anon(&srv, "PUT", "/acls/new2", b"x").await, 403);
    assert_eq!(anon(&srv, "GET", "/acls?list-type=2", b"").await, 403);

    // A copy never takes its source's ACL: the copy of a public object is private unless the
    // copy request says otherwise.
    root.copy_object()
        .bucket("acls")
        .key("copy")
        .copy_source("acls/public")
        .send()
        .await
        .unwrap();
    assert_eq!(anon(&srv, "GET", "/acls/copy", b"").await, 403);
    root.copy_object()
        .bucket("acls")
        .key("copy2")
        .copy_source("acls/private")
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    assert_eq!(anon(&srv, "GET", "/acls/copy2", b"").await, 200);

    // A multipart upload's ACL is the completed object's.
    let up = root
        .create_multipart_upload()
        .bucket("acls")
        .key("mp")
        .acl(ObjectCannedAcl::PublicRead)
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let part = root
        .upload_part()
        .bucket("acls")
        .key("mp")
        .upload_id(id)
        .part_number(1)
        .body(b"part".to_vec().into())
        .send()
        .await
        .unwrap();
    root.complete_multipart_upload()
        .bucket("acls")
        .key("mp")
        .upload_id(id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .parts(
                    aws_sdk_s3::types::CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(anon(&srv, "GET", "/acls/mp", b"").await, 200);
}

#[tokio::test]
async fn bucket_owner_enforced_is_the_default_and_turns_acls_off() {
    let srv = TestServer::start(4).await;
    let root = srv.client();
    srv.create_bucket("enforced").await;
    let got = root
        .get_bucket_ownership_controls()
        .bucket("enforced")
        .send()
        .await
        .unwrap();
    let rules = got.ownership_controls().unwrap().rules();
    assert_eq!(
        rules[0].object_ownership(),
        &ObjectOwnership::BucketOwnerEnforced
    );

    // Only the owner's full control: a public ACL is refused, the equivalent of none accepted.
    assert_eq!(
        put_with_acl(&root, "enforced", "k", ObjectCannedAcl::PublicRead)
            .await
            .as_deref(),
        Some("AccessControlListNotSupported")
    );
    assert_eq!(
        put_with_acl(
            &root,
            "enforced",
            "k",
            ObjectCannedAcl::BucketOwnerFullControl
        )
        .await,
        None
    );
    assert_eq!(
        code(
            root.put_bucket_acl()
                .bucket("enforced")
                .acl(BucketCannedAcl::PublicRead)
                .send()
                .await
        )
        .as_deref(),
        Some("AccessControlListNotSupported")
    );
    root.put_bucket_acl()
        .bucket("enforced")
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .expect("private is accepted");
    root.get_bucket_acl()
        .bucket("enforced")
        .send()
        .await
        .expect("GetBucketAcl still answers");

    // CreateBucket with a public ACL and no ownership: AWS's refusal; with ObjectWriter: made.
    assert_eq!(
        code(
            root.create_bucket()
                .bucket("made-public")
                .acl(BucketCannedAcl::PublicRead)
                .send()
                .await
        )
        .as_deref(),
        Some("InvalidBucketAclWithObjectOwnership")
    );
    acl_bucket(&root, "made-public", Some(BucketCannedAcl::PublicRead)).await;

    // Turning ACLs off takes back what they gave; deleting the controls gives it back.
    assert_eq!(
        put_with_acl(&root, "made-public", "p", ObjectCannedAcl::PublicRead).await,
        None
    );
    assert_eq!(anon(&srv, "GET", "/made-public/p", b"").await, 200);
    let enforce = OwnershipControls::builder()
        .rules(
            OwnershipControlsRule::builder()
                .object_ownership(ObjectOwnership::BucketOwnerEnforced)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    // Not while the bucket's own ACL is public (AWS's check); once it is private, yes.
    assert_eq!(
        code(
            root.put_bucket_ownership_controls()
                .bucket("made-public")
                .ownership_controls(enforce.clone())
                .send()
                .await
        )
        .as_deref(),
        Some("InvalidBucketAclWithObjectOwnership")
    );
    root.put_bucket_acl()
        .bucket("made-public")
        .acl(BucketCannedAcl::Private)
        .send()
        .await
        .unwrap();
    assert_eq!(anon(&srv, "GET", "/made-public/p", b"").await, 200);
    root.put_bucket_ownership_controls()
        .bucket("made-public")
        .ownership_controls(enforce)
        .send()
        .await
        .unwrap();
    assert_eq!(anon(&srv, "GET", "/made-public/p", b"").await, 403);
    let acl = root
        .get_object_acl()
        .bucket("made-public")
        .key("p")
        .send()
        .await
        .unwrap();
    assert_eq!(acl.grants().len(), 1, "{acl:?}");
    root.delete_bucket_ownership_controls()
        .bucket("made-public")
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(
            root.get_bucket_ownership_controls()
                .bucket("made-public")
                .send()
                .await
        )
        .as_deref(),
        Some("OwnershipControlsNotFoundError")
    );
    assert_eq!(anon(&srv, "GET", "/made-public/p", b"").await, 200);
}

#[tokio::test]
async fn public_access_block_refuses_and_ignores_public_access() {
    let srv = TestServer::start(4).await;
    let root = srv.client();
    acl_bucket(&root, "pab", None).await;
    assert_eq!(
        put_with_acl(&root, "pab", "p", ObjectCannedAcl::PublicRead).await,
        None
    );
    put(&root, "pab", "q").await.unwrap();
    assert_eq!(anon(&srv, "GET", "/pab/p", b"").await, 200);
    assert_eq!(
        code(root.get_public_access_block().bucket("pab").send().await).as_deref(),
        Some("NoSuchPublicAccessBlockConfiguration")
    );
    let set = |acls: bool, ignore: bool, policy: bool, restrict: bool| {
        PublicAccessBlockConfiguration::builder()
            .block_public_acls(acls)
            .ignore_public_acls(ignore)
            .block_public_policy(policy)
            .restrict_public_buckets(restrict)
            .build()
    };
    let put_pab = |cfg: PublicAccessBlockConfiguration| {
        let root = root.clone();
        async move {
            root.put_public_access_block()
                .bucket("pab")
                .public_access_block_configuration(cfg)
                .send()
                .await
                .expect("put public access block");
        }
    };

    // IgnorePublicAcls: the public grant no longer counts.
    put_pab(set(false, true, false, false)).await;
    assert_eq!(anon(&srv, "GET", "/pab/p", b"").await, 403);
    let got = root
        .get_public_access_block()
        .bucket("pab")
        .send()
        .await
        .unwrap();
    let got = got.public_access_block_configuration().unwrap();
    assert_eq!(got.ignore_public_acls(), Some(true));
    assert_eq!(got.block_public_acls(), Some(false));

    // BlockPublicAcls: a public ACL is refused, a private one accepted.
    put_pab(set(true, false, false, false)).await;
    assert_eq!(
        code(
            root.put_object_acl()
                .bucket("pab")
                .key("q")
                .acl(ObjectCannedAcl::PublicRead)
                .send()
                .await
        )
        .as_deref(),
        Some("AccessDenied")
    );
    assert_eq!(
        put_with_acl(&root, "pab", "r", ObjectCannedAcl::PublicRead)
            .await
            .as_deref(),
        Some("AccessDenied")
    );
    root.put_object_acl()
        .bucket("pab")
        .key("q")
        .acl(ObjectCannedAcl::Private)
        .send()
        .await
        .expect("private ACL under BlockPublicAcls");

    // BlockPublicPolicy: a public policy is refused; one naming an account principal accepted.
    put_pab(set(false, false, true, false)).await;
    let public = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pab/*"}]}"#;
    assert_eq!(
        code(
            root.put_bucket_policy()
                .bucket("pab")
                .policy(public)
                .send()
                .await
        )
        .as_deref(),
        Some("AccessDenied")
    );
    let (_, _) = user_with_key(&srv, "carol").await;
    let carol_arn = user_arn(&srv, "carol").await;
    let private = public.replace(
        "\"Principal\":\"*\"",
        &format!("\"Principal\":{{\"AWS\":\"{carol_arn}\"}}"),
    );
    root.put_bucket_policy()
        .bucket("pab")
        .policy(private)
        .send()
        .await
        .expect("non-public policy under BlockPublicPolicy");

    // RestrictPublicBuckets: a public policy stops serving anonymous callers.
    root.delete_public_access_block()
        .bucket("pab")
        .send()
        .await
        .unwrap();
    root.put_bucket_policy()
        .bucket("pab")
        .policy(public)
        .send()
        .await
        .unwrap();
    assert_eq!(anon(&srv, "GET", "/pab/q", b"").await, 200);
    put_pab(set(false, false, false, true)).await;
    assert_eq!(anon(&srv, "GET", "/pab/q", b"").await, 403);
    root.delete_public_access_block()
        .bucket("pab")
        .send()
        .await
        .unwrap();
    assert_eq!(anon(&srv, "GET", "/pab/q", b"").await, 200);
}

/// The keys of a DeleteObjects answer: (deleted, refused with their codes).
async fn delete_keys(
    c: &aws_sdk_s3::Client,
    bucket: &str,
    keys: &[&str],
) -> (Vec<String>, Vec<(String, String)>) {
    use aws_sdk_s3::types::{Delete, ObjectIdentifier};
    let del = Delete::builder()
        .set_objects(Some(
            keys.iter()
                .map(|k| ObjectIdentifier::builder().key(*k).build().unwrap())
                .collect(),
        ))
        .build()
        .unwrap();
    let out = c
        .delete_objects()
        .bucket(bucket)
        .delete(del)
        .send()
        .await
        .expect("DeleteObjects answers 200 with per-key results");
    let mut deleted: Vec<String> = out
        .deleted()
        .iter()
        .filter_map(|d| d.key().map(str::to_owned))
        .collect();
    deleted.sort();
    let mut refused: Vec<(String, String)> = out
        .errors()
        .iter()
        .map(|e| {
            (
                e.key().unwrap_or_default().to_owned(),
                e.code().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    refused.sort();
    (deleted, refused)
}

/// DeleteObjects decides each key as DeleteObject decides it: a bucket policy's deny refuses
/// the keys it names (the identity policy's allow notwithstanding), and a bucket ACL's WRITE
/// grant allows a user no policy allows. Each beside DeleteObject of the same kind of key.
#[tokio::test]
async fn delete_objects_decides_each_key_by_bucket_policy_and_acl_as_delete_object_does() {
    let srv = TestServer::start(4).await;
    let root = srv.client();
    acl_bucket(&root, "dob", None).await;
    for k in [
        "keep/a", "keep/b", "tmp/a", "tmp/b", "acl/a", "acl/b", "acl/c",
    ] {
        put(&root, "dob", k).await.unwrap();
    }
    let exists = |k: &'static str| {
        let root = root.clone();
        async move { get(&root, "dob", k).await.is_ok() }
    };

    // alice: s3:* on the bucket by her own policy; the bucket policy denies her deletes of keep/.
    let (ak, asec) = user_with_key(&srv, "alice").await;
    let alice = srv.client_with(&ak, &asec);
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "PutUserPolicy"),
            ("UserName", "alice"),
            ("PolicyName", "all"),
            (
                "PolicyDocument",
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":["arn:aws:s3:::dob","arn:aws:s3:::dob/*"]}]}"#,
            ),
        ],
    )
    .await);
    let alice_arn = user_arn(&srv, "alice").await;
    root.put_bucket_policy()
        .bucket("dob")
        .policy(format!(
            r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Deny","Principal":{{"AWS":"{alice_arn}"}},"Action":"s3:DeleteObject","Resource":"arn:aws:s3:::dob/keep/*"}}]}}"#
        ))
        .send()
        .await
        .expect("put bucket policy");
    // DeleteObject: the deny holds for keep/, tmp/ is deleted.
    let e = alice
        .delete_object()
        .bucket("dob")
        .key("keep/a")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("AccessDenied"));
    alice
        .delete_object()
        .bucket("dob")
        .key("tmp/a")
        .send()
        .await
        .expect("alice deletes tmp/a");
    // DeleteObjects: the same per key.
    let (deleted, refused) = delete_keys(&alice, "dob", &["keep/b", "tmp/b"]).await;
    assert_eq!(deleted, ["tmp/b"]);
    assert_eq!(refused, [("keep/b".to_owned(), "AccessDenied".to_owned())]);
    assert!(exists("keep/a").await && exists("keep/b").await);
    assert!(!exists("tmp/a").await && !exists("tmp/b").await);

    // carol: no policy at all; the bucket ACL grants her WRITE. bob: nothing.
    let (ck, cs) = user_with_key(&srv, "carol").await;
    let carol = srv.client_with(&ck, &cs);
    let (bk, bs) = user_with_key(&srv, "bob").await;
    let bob = srv.client_with(&bk, &bs);
    let carol_id = user_id(&srv, "carol").await;
    let root_id = root
        .get_bucket_acl()
        .bucket("dob")
        .send()
        .await
        .unwrap()
        .owner()
        .and_then(|o| o.id())
        .unwrap()
        .to_owned();
    root.put_bucket_acl()
        .bucket("dob")
        .grant_full_control(format!("id={root_id}"))
        .grant_write(format!("id={carol_id}"))
        .send()
        .await
        .expect("grant carol write");
    carol
        .delete_object()
        .bucket("dob")
        .key("acl/a")
        .send()
        .await
        .expect("carol deletes acl/a by the ACL grant");
    let (deleted, refused) = delete_keys(&bob, "dob", &["acl/b"]).await;
    assert!(deleted.is_empty());
    assert_eq!(refused, [("acl/b".to_owned(), "AccessDenied".to_owned())]);
    assert!(exists("acl/b").await);
    let (deleted, refused) = delete_keys(&carol, "dob", &["acl/b", "acl/c"]).await;
    assert_eq!(deleted, ["acl/b", "acl/c"]);
    assert!(refused.is_empty(), "{refused:?}");
    assert!(!exists("acl/b").await && !exists("acl/c").await);
}

/// A GET or HEAD of a key that does not exist says NoSuchKey only to a caller who may list the
/// bucket (by a policy or the bucket ACL's READ), AccessDenied to anyone else (AWS, GetObject);
/// a bucket that does not exist is NoSuchBucket to anyone.
#[tokio::test]
async fn a_missing_key_shows_only_to_who_may_list_the_bucket() {
    let srv = TestServer::start(4).await;
    let root = srv.client();
    acl_bucket(&root, "listable", Some(BucketCannedAcl::PublicRead)).await;
    acl_bucket(&root, "unlisted", None).await;
    for b in ["listable", "unlisted"] {
        assert_eq!(
            put_with_acl(&root, b, "pub", ObjectCannedAcl::PublicRead).await,
            None
        );
    }
    // Anonymous: the public objects (the controls), then the missing keys.
    assert_eq!(anon(&srv, "GET", "/listable/pub", b"").await, 200);
    assert_eq!(anon(&srv, "GET", "/unlisted/pub", b"").await, 200);
    assert_eq!(anon(&srv, "GET", "/listable/nope", b"").await, 404);
    assert_eq!(anon(&srv, "HEAD", "/listable/nope", b"").await, 404);
    assert_eq!(anon(&srv, "GET", "/unlisted/nope", b"").await, 403);
    assert_eq!(anon(&srv, "HEAD", "/unlisted/nope", b"").await, 403);
    assert_eq!(anon(&srv, "GET", "/no-such-bucket/nope", b"").await, 404);

    // A user allowed GetObject: AccessDenied for a missing key until it may list the bucket.
    let (ak, sk) = user_with_key(&srv, "getter").await;
    let getter = srv.client_with(&ak, &sk);
    let policy = |list: bool| {
        let mut actions = vec![
            r#"{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::unlisted/*"}"#,
        ];
        if list {
            actions.push(
                r#"{"Effect":"Allow","Action":"s3:ListBucket","Resource":"arn:aws:s3:::unlisted"}"#,
            );
        }
        format!(
            r#"{{"Version":"2012-10-17","Statement":[{}]}}"#,
            actions.join(",")
        )
    };
    for list in [false, true] {
        ok(&call(
            &srv,
            0,
            ROOT,
            "iam",
            &[
                ("Action", "PutUserPolicy"),
                ("UserName", "getter"),
                ("PolicyName", "get"),
                ("PolicyDocument", &policy(list)),
            ],
        )
        .await);
        get(&getter, "unlisted", "pub").await.unwrap();
        let missing = get(&getter, "unlisted", "nope").await;
        let want = if list { "NoSuchKey" } else { "AccessDenied" };
        assert_eq!(missing, Err(want.to_owned()), "ListBucket allowed: {list}");
    }
    // Root may list everything.
    assert_eq!(
        get(&root, "unlisted", "nope").await,
        Err("NoSuchKey".to_owned())
    );
}
