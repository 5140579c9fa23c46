//! Users, groups, policies and keys through the IAM query API (`POST /`, signed for service
//! `iam` without `x-amz-content-sha256`, as the aws cli sends it), and S3 requests with the
//! keys it hands out, allowed and refused as the policies say: every refusal beside a control
//! request that passes.

use std::time::{Duration, Instant, SystemTime};

use quarry_integration::*;

/// Sends an IAM (or STS) query call signed as the AWS SDKs sign them, to the node `node` places
/// after the front node ([`TestServer::node_from_front`]; 0: the node the server's S3 clients
/// use, so a test sees its own changes at once); returns status and body.
pub(crate) async fn call(
    srv: &TestServer,
    node: usize,
    creds: (&str, &str),
    service: &str,
    params: &[(&str, &str)],
) -> (u16, String) {
    call_with_token(srv, node, creds, None, service, params).await
}

/// [`call`] signed with temporary credentials' session token too.
pub(crate) async fn call_with_token(
    srv: &TestServer,
    node: usize,
    creds: (&str, &str),
    token: Option<&str>,
    service: &str,
    params: &[(&str, &str)],
) -> (u16, String) {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    use aws_sigv4::sign::v4;
    let version = if service == "sts" {
        "2011-06-15"
    } else {
        "2010-05-08"
    };
    let mut form: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect();
    form.push(format!("Version={version}"));
    let body = form.join("&").into_bytes();
    let url = format!("{}/", srv.node_endpoint(srv.node_from_front(node)));
    let identity = aws_credential_types::Credentials::new(
        creds.0,
        creds.1,
        token.map(str::to_owned),
        None,
        "t",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name(service)
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let ct = "application/x-www-form-urlencoded; charset=utf-8";
    let req = SignableRequest::new(
        "POST",
        &url,
        [("content-type", ct)].into_iter(),
        SignableBody::Bytes(&body),
    )
    .unwrap();
    let (instructions, _) = sign(req, &params).unwrap().into_parts();
    let mut headers: Vec<(String, String)> = instructions
        .headers()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(!headers.iter().any(|(k, _)| k == "x-amz-content-sha256"));
    headers.push(("content-type".into(), ct.into()));
    let r = send_raw("POST", &url, &headers, body).await;
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

pub(crate) fn elem<'a>(xml: &'a str, name: &str) -> &'a str {
    let open = format!("<{name}>");
    let start = xml
        .find(&open)
        .unwrap_or_else(|| panic!("no <{name}> in {xml}"))
        + open.len();
    let end = xml[start..].find(&format!("</{name}>")).unwrap() + start;
    &xml[start..end]
}

pub(crate) const ROOT: (&str, &str) = (ACCESS_KEY, SECRET_KEY);

#[track_caller]
pub(crate) fn ok((status, body): &(u16, String)) {
    assert_eq!(*status, 200, "{body}");
}

#[track_caller]
fn refused((status, body): &(u16, String), want_status: u16, code: &str) {
    assert_eq!(*status, want_status, "{body}");
    assert!(body.contains(&format!("<Code>{code}</Code>")), "{body}");
}

/// Creates a user with one access key; returns (access key, secret).
pub(crate) async fn user_with_key(srv: &TestServer, name: &str) -> (String, String) {
    ok(&call(
        srv,
        0,
        ROOT,
        "iam",
        &[("Action", "CreateUser"), ("UserName", name)],
    )
    .await);
    let r = call(
        srv,
        0,
        ROOT,
        "iam",
        &[("Action", "CreateAccessKey"), ("UserName", name)],
    )
    .await;
    ok(&r);
    (
        elem(&r.1, "AccessKeyId").to_owned(),
        xml_unescape(elem(&r.1, "SecretAccessKey")),
    )
}

pub(crate) async fn put(c: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<(), String> {
    c.put_object()
        .bucket(bucket)
        .key(key)
        .body(b"data".to_vec().into())
        .send()
        .await
        .map(|_| ())
        .map_err(|e| error_code(&e).unwrap_or_else(|| describe(&e)))
}

pub(crate) async fn get(c: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<(), String> {
    c.get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| error_code(&e).unwrap_or_else(|| describe(&e)))
}

pub(crate) async fn list(c: &aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Result<(), String> {
    c.list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| error_code(&e).unwrap_or_else(|| describe(&e)))
}

#[track_caller]
pub(crate) fn denied(r: Result<(), String>) {
    assert_eq!(r, Err("AccessDenied".to_owned()), "expected AccessDenied");
}

#[tokio::test]
async fn users_policies_groups_and_keys() {
    let srv = TestServer::start(4).await;
    let root = srv.client();
    for b in ["photos", "other"] {
        srv.create_bucket(b).await;
        put(&root, b, "a.jpg").await.unwrap();
        put(&root, b, "secret/x").await.unwrap();
    }
    let (ak, sk) = user_with_key(&srv, "alice").await;
    let alice = srv.client_with(&ak, &sk);

    // A user without policies may do nothing; root (the control) everything.
    denied(get(&alice, "photos", "a.jpg").await);
    denied(
        alice
            .list_buckets()
            .send()
            .await
            .map(|_| ())
            .map_err(|e| error_code(&e).unwrap()),
    );
    get(&root, "photos", "a.jpg").await.unwrap();

    // An inline policy: read photos, list under home/ only.
    let read = r#"{"Version":"2012-10-17","Statement":[
        {"Effect":"Allow","Action":["s3:GetObject"],"Resource":"arn:aws:s3:::photos/*"},
        {"Effect":"Allow","Action":"s3:ListBucket","Resource":"arn:aws:s3:::photos",
         "Condition":{"StringLike":{"s3:prefix":"home/${aws:username}/*"}}}]}"#;
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "PutUserPolicy"),
            ("UserName", "alice"),
            ("PolicyName", "read"),
            ("PolicyDocument", read),
        ],
    )
    .await);
    get(&alice, "photos", "a.jpg").await.unwrap();
    denied(get(&alice, "other", "a.jpg").await);
    denied(put(&alice, "photos", "b.jpg").await);
    list(&alice, "photos", "home/alice/").await.unwrap();
    denied(list(&alice, "photos", "home/bob/").await);
    let r = alice
        .get_object()
        .bucket("photos")
        .key("nope")
        .send()
        .await
        .unwrap_err();
    // S3 tells NoSuchKey only to who may list the bucket; alice may list home/alice/ only.
    assert_eq!(
        error_code(&r).as_deref(),
        Some("AccessDenied"),
        "GetObject alone does not say which keys exist"
    );

    // A managed policy that denies overrides the allow.
    let deny = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"s3:*","Resource":"arn:aws:s3:::photos/secret/*"}]}"#;
    let r = call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "CreatePolicy"),
            ("PolicyName", "no-secrets"),
            ("PolicyDocument", deny),
        ],
    )
    .await;
    ok(&r);
    let arn = elem(&r.1, "Arn").to_owned();
    assert_eq!(arn, "arn:aws:iam::000000000000:policy/no-secrets");
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "AttachUserPolicy"),
            ("UserName", "alice"),
            ("PolicyArn", &arn),
        ],
    )
    .await);
    denied(get(&alice, "photos", "secret/x").await);
    get(&alice, "photos", "a.jpg").await.unwrap();

    // A group's policy applies to its members.
    let upload = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:PutObject","Resource":"arn:aws:s3:::photos/uploads/*"}]}"#;
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[("Action", "CreateGroup"), ("GroupName", "uploaders")],
    )
    .await);
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "PutGroupPolicy"),
            ("GroupName", "uploaders"),
            ("PolicyName", "up"),
            ("PolicyDocument", upload),
        ],
    )
    .await);
    denied(put(&alice, "photos", "uploads/1").await);
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "AddUserToGroup"),
            ("GroupName", "uploaders"),
            ("UserName", "alice"),
        ],
    )
    .await);
    put(&alice, "photos", "uploads/1").await.unwrap();
    denied(put(&alice, "photos", "elsewhere").await);
    let r = call(
        &srv,
        0,
        ROOT,
        "iam",
        &[("Action", "GetGroup"), ("GroupName", "uploaders")],
    )
    .await;
    ok(&r);
    assert!(r.1.contains("<UserName>alice</UserName>"), "{}", r.1);

    // DeleteObjects decides per key.
    let del = alice
        .delete_objects()
        .bucket("photos")
        .delete(
            aws_sdk_s3::types::Delete::builder()
                .objects(
                    aws_sdk_s3::types::ObjectIdentifier::builder()
                        .key("uploads/1")
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(del.errors().len(), 1);
    assert_eq!(del.errors()[0].code(), Some("AccessDenied"));

    // Who am I, by STS; a user may not manage IAM without a policy that says so.
    let r = call(
        &srv,
        0,
        (&ak, &sk),
        "sts",
        &[("Action", "GetCallerIdentity")],
    )
    .await;
    ok(&r);
    assert_eq!(elem(&r.1, "Arn"), "arn:aws:iam::000000000000:user/alice");
    refused(
        &call(
            &srv,
            0,
            (&ak, &sk),
            "iam",
            &[("Action", "CreateUser"), ("UserName", "mallory")],
        )
        .await,
        403,
        "AccessDenied",
    );
    refused(
        &call(&srv, 0, (&ak, &sk), "iam", &[("Action", "ListAccessKeys")]).await,
        403,
        "AccessDenied",
    );

    // Errors IAM clients expect.
    refused(
        &call(
            &srv,
            0,
            ROOT,
            "iam",
            &[("Action", "CreateUser"), ("UserName", "alice")],
        )
        .await,
        409,
        "EntityAlreadyExists",
    );
    refused(
        &call(
            &srv,
            0,
            ROOT,
            "iam",
            &[("Action", "GetUser"), ("UserName", "nobody")],
        )
        .await,
        404,
        "NoSuchEntity",
    );
    refused(
        &call(
            &srv,
            0,
            ROOT,
            "iam",
            &[("Action", "DeleteUser"), ("UserName", "alice")],
        )
        .await,
        409,
        "DeleteConflict",
    );
    let bad = r#"{"Version":"2012-10-17","Statement":[{"Sid":"Oops","Effect":"Allow","Action":"GetObject","Resource":"*"}]}"#;
    let r = call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "PutUserPolicy"),
            ("UserName", "alice"),
            ("PolicyName", "bad"),
            ("PolicyDocument", bad),
        ],
    )
    .await;
    refused(&r, 400, "MalformedPolicyDocument");
    assert!(
        r.1.contains("Statement 1 (Sid &quot;Oops&quot;): Action"),
        "{}",
        r.1
    );
    // IAM's rule: a Sid once per policy (both statements are fine on their own).
    let twice = r#"{"Version":"2012-10-17","Statement":[{"Sid":"S1","Effect":"Allow","Action":"s3:GetObject","Resource":"*"},{"Sid":"S1","Effect":"Allow","Action":"s3:PutObject","Resource":"*"}]}"#;
    let r = call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "CreatePolicy"),
            ("PolicyName", "twice"),
            ("PolicyDocument", twice),
        ],
    )
    .await;
    refused(&r, 400, "MalformedPolicyDocument");
    assert!(
        r.1.contains("Statement 2 (Sid &quot;S1&quot;): Sid"),
        "{}",
        r.1
    );
    refused(
        &call(&srv, 0, ROOT, "iam", &[("Action", "FlyToTheMoon")]).await,
        400,
        "InvalidAction",
    );

    // A key made inactive is refused at once on the node that changed it; active again, it works.
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "UpdateAccessKey"),
            ("UserName", "alice"),
            ("AccessKeyId", &ak),
            ("Status", "Inactive"),
        ],
    )
    .await);
    assert_eq!(
        get(&alice, "photos", "a.jpg").await,
        Err("InvalidAccessKeyId".to_owned())
    );
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "UpdateAccessKey"),
            ("UserName", "alice"),
            ("AccessKeyId", &ak),
            ("Status", "Active"),
        ],
    )
    .await);
    get(&alice, "photos", "a.jpg").await.unwrap();

    // The secret is stored sealed, not in the clear.
    let mut found_state = false;
    for i in 0..srv.drive_count() {
        let path = srv.drive_path(i).join(".quarry.sys/buckets/_system/iam");
        if let Ok(bytes) = std::fs::read(&path) {
            found_state = true;
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                !text.contains(&sk),
                "the secret is in the clear in {path:?}"
            );
            assert!(text.contains(&ak));
        }
    }
    assert!(found_state, "no drive holds the IAM state");

    // Deleted: refused at once.
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "DeleteAccessKey"),
            ("UserName", "alice"),
            ("AccessKeyId", &ak),
        ],
    )
    .await);
    assert_eq!(
        get(&alice, "photos", "a.jpg").await,
        Err("InvalidAccessKeyId".to_owned())
    );
}

#[tokio::test]
async fn identities_survive_a_restart() {
    if cluster_mode() {
        return;
    }
    let mut srv = TestServer::start_single(4).await;
    srv.create_bucket("keep").await;
    let (ak, sk) = user_with_key(&srv, "bob").await;
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":["arn:aws:s3:::keep","arn:aws:s3:::keep/*"]}]}"#;
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "PutUserPolicy"),
            ("UserName", "bob"),
            ("PolicyName", "all"),
            ("PolicyDocument", policy),
        ],
    )
    .await);
    put(&srv.client_with(&ak, &sk), "keep", "k").await.unwrap();
    srv.restart().await;
    let bob = srv.client_with(&ak, &sk);
    get(&bob, "keep", "k").await.unwrap();
    let r = call(&srv, 0, ROOT, "iam", &[("Action", "ListUsers")]).await;
    ok(&r);
    assert!(r.1.contains("<UserName>bob</UserName>"), "{}", r.1);
}

#[tokio::test]
async fn a_change_through_one_node_reaches_the_others_within_a_second() {
    let srv = TestServer::start_cluster(2, 2, 4).await;
    srv.create_bucket("shared").await;
    let (ak, sk) = user_with_key(&srv, "carol").await;
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:PutObject","Resource":"arn:aws:s3:::shared/*"}]}"#;
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "PutUserPolicy"),
            ("UserName", "carol"),
            ("PolicyName", "w"),
            ("PolicyDocument", policy),
        ],
    )
    .await);
    let on_other = sdk_client(&srv.node_endpoint(srv.node_from_front(1)), &ak, &sk);
    // Allowed on the other node soon after the change on the first.
    let start = Instant::now();
    while put(&on_other, "shared", "k").await.is_err() {
        assert!(
            start.elapsed() < Duration::from_millis(1500),
            "the other node did not see the new user"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Deleted on the first: refused on the other within a second.
    ok(&call(
        &srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "DeleteAccessKey"),
            ("UserName", "carol"),
            ("AccessKeyId", &ak),
        ],
    )
    .await);
    let start = Instant::now();
    loop {
        match put(&on_other, "shared", "k").await {
            Err(code) if code == "InvalidAccessKeyId" => break,
            _ => assert!(
                start.elapsed() < Duration::from_millis(1500),
                "the other node still takes a deleted key"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
