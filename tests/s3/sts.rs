//! Temporary credentials: STS AssumeRole and GetSessionToken at the S3 endpoint, and S3 requests signed with the
//! session's keys and its token (header SigV4, the SDK's aws-chunked uploads, presigned URLs).
//! Every refusal beside a control request that passes.

use std::time::{Duration, SystemTime};

use quarry_integration::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use quarry_integration::aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use quarry_integration::aws_sdk_s3::presigning::PresigningConfig;
use quarry_integration::*;

use crate::iam::{call, call_with_token, denied, elem, get, list, ok, put, user_with_key, ROOT};

/// An SDK client signing with temporary credentials (the token goes in
/// `x-amz-security-token`, or in the query of a presigned URL).
fn session_client(srv: &TestServer, s: &Session) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(srv.endpoint())
        .force_path_style(true)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            &s.access_key,
            &s.secret_key,
            Some(s.token.clone()),
            None,
            "sts-test",
        ))
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

#[derive(Debug, Clone)]
struct Session {
    access_key: String,
    secret_key: String,
    token: String,
}

async fn assume(srv: &TestServer, creds: (&str, &str), extra: &[(&str, &str)]) -> (u16, String) {
    let mut params = vec![("Action", "AssumeRole")];
    // The defaults, unless the call gives its own.
    for (k, v) in [
        ("RoleArn", "arn:aws:iam::000000000000:role/any"),
        ("RoleSessionName", "test-session"),
    ] {
        if !extra.iter().any(|(e, _)| *e == k) {
            params.push((k, v));
        }
    }
    params.extend_from_slice(extra);
    call(srv, 0, creds, "sts", &params).await
}

fn session_of(r: &(u16, String)) -> Session {
    ok(r);
    Session {
        access_key: elem(&r.1, "AccessKeyId").to_owned(),
        secret_key: xml_unescape(elem(&r.1, "SecretAccessKey")),
        token: xml_unescape(elem(&r.1, "SessionToken")),
    }
}

#[track_caller]
fn refused((status, body): &(u16, String), want_status: u16, code: &str) {
    assert_eq!(*status, want_status, "{body}");
    assert!(body.contains(&format!("<Code>{code}</Code>")), "{body}");
}

fn code_of<T, E, R>(r: Result<T, SdkError<E, R>>) -> String
where
    T: std::fmt::Debug,
    E: ProvideErrorMetadata + std::fmt::Debug,
    R: std::fmt::Debug,
{
    match r {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(e) => error_code(&e).unwrap_or_else(|| format!("{e:?}")),
    }
}

const READ_WRITE_DATA: &str = r#"{"Version":"2012-10-17","Statement":[
    {"Effect":"Allow","Action":"s3:*","Resource":["arn:aws:s3:::data","arn:aws:s3:::data/*"]}]}"#;

async fn user_with_policy(srv: &TestServer, name: &str) -> (String, String) {
    let keys = user_with_key(srv, name).await;
    ok(&call(
        srv,
        0,
        ROOT,
        "iam",
        &[
            ("Action", "PutUserPolicy"),
            ("UserName", name),
            ("PolicyName", "data"),
            ("PolicyDocument", READ_WRITE_DATA),
        ],
    )
    .await);
    keys
}

#[tokio::test]
async fn sessions_act_as_their_user_narrowed_by_the_session_policy() {
    let srv = TestServer::start(4).await;
    let root = srv.client();
    for b in ["data", "other"] {
        srv.create_bucket(b).await;
        put(&root, b, "a.txt").await.unwrap();
        put(&root, b, "b/x").await.unwrap();
    }
    let (ak, sk) = user_with_policy(&srv, "alice").await;

    // AWS's answer shape: credentials with an expiry, the assumed user.
    let r = assume(&srv, (&ak, &sk), &[("DurationSeconds", "900")]).await;
    let s = session_of(&r);
    assert!(s.access_key.starts_with("QSTS"), "{}", r.1);
    assert!(r.1.contains("<Expiration>"), "{}", r.1);
    assert_eq!(
        elem(&r.1, "Arn"),
        "arn:aws:iam::000000000000:user/alice",
        "{}",
        r.1
    );
    let session = session_client(&srv, &s);
    get(&session, "data", "a.txt").await.unwrap();
    put(&session, "data", "new").await.unwrap();
    list(&session, "data", "").await.unwrap();
    // A multipart upload and the SDK's aws-chunked body (checksum trailer) carry the token too.
    session
        .put_object()
        .bucket("data")
        .key("chunked")
        .checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Crc32)
        .body(vec![7u8; 100_000].into())
        .send()
        .await
        .unwrap();
    // The session is no more than its user: alice may not touch "other" (root, the control, may).
    denied(get(&session, "other", "a.txt").await);
    get(&root, "other", "a.txt").await.unwrap();

    // The same keys without the token: unknown key. With a garbage token: InvalidToken.
    let no_token = srv.client_with(&s.access_key, &s.secret_key);
    assert_eq!(
        code_of(
            no_token
                .get_object()
                .bucket("data")
                .key("a.txt")
                .send()
                .await
        ),
        "InvalidAccessKeyId"
    );
    let garbage = Session {
        token: "bm90IGEgdG9rZW4gYXQgYWxsIGJ1dCBsb25nIGVub3VnaA==".into(),
        ..s.clone()
    };
    assert_eq!(
        code_of(
            session_client(&srv, &garbage)
                .get_object()
                .bucket("data")
                .key("a.txt")
                .send()
                .await
        ),
        "InvalidToken"
    );
    // Another session's token with these keys: the signature is checked against the other
    // session's key only.
    let other = session_of(&assume(&srv, (&ak, &sk), &[]).await);
    let swapped = Session {
        token: other.token.clone(),
        ..s.clone()
    };
    assert_eq!(
        code_of(
            session_client(&srv, &swapped)
                .get_object()
                .bucket("data")
                .key("a.txt")
                .send()
                .await
        ),
        "InvalidAccessKeyId"
    );
    get(&session_client(&srv, &other), "data", "a.txt")
        .await
        .unwrap();

    // A session policy narrows: only GetObject on data/a.txt.
    let narrow = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::data/a.txt"}]}"#;
    let narrowed = session_client(
        &srv,
        &session_of(&assume(&srv, (&ak, &sk), &[("Policy", narrow)]).await),
    );
    get(&narrowed, "data", "a.txt").await.unwrap();
    denied(get(&narrowed, "data", "b/x").await);
    denied(put(&narrowed, "data", "c").await);
    get(&session, "data", "b/x").await.unwrap();
    // ... and never widens: everything, but alice has nothing on "other".
    let all = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}"#;
    let wide = session_client(
        &srv,
        &session_of(&assume(&srv, (&ak, &sk), &[("Policy", all)]).await),
    );
    denied(get(&wide, "other", "a.txt").await);
    get(&wide, "data", "a.txt").await.unwrap();

    // A presigned URL carries the token in its query; without it the key is unknown.
    let url = session
        .get_object()
        .bucket("data")
        .key("a.txt")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).unwrap())
        .await
        .unwrap()
        .uri()
        .to_owned();
    assert!(url.contains("X-Amz-Security-Token="), "{url}");
    let http = reqwest::Client::new();
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"data");
    let stripped: String = url
        .split('&')
        .filter(|p| !p.starts_with("X-Amz-Security-Token="))
        .collect::<Vec<_>>()
        .join("&");
    let r = http.get(&stripped).send().await.unwrap();
    assert_eq!(r.status(), 403);

    // The parameters are checked as AWS checks them; the control above asked for 900.
    for bad in ["899", "43201", "soon"] {
        refused(
            &assume(&srv, (&ak, &sk), &[("DurationSeconds", bad)]).await,
            400,
            "ValidationError",
        );
    }
    ok(&assume(&srv, (&ak, &sk), &[("DurationSeconds", "43200")]).await);
    refused(
        &assume(&srv, (&ak, &sk), &[("RoleSessionName", "a b")]).await,
        400,
        "ValidationError",
    );
    refused(
        &assume(&srv, (&ak, &sk), &[("Policy", "{not json")]).await,
        400,
        "MalformedPolicyDocument",
    );
    // The root user has no user to act as: AWS refuses it AssumeRole too.
    refused(&assume(&srv, ROOT, &[]).await, 403, "AccessDenied");
    // An unsigned call is refused.
    let r = send_raw(
        "POST",
        &format!("{}/", srv.endpoint()),
        &[(
            "content-type".into(),
            "application/x-www-form-urlencoded".into(),
        )],
        b"Action=AssumeRole&Version=2011-06-15".to_vec(),
    )
    .await;
    assert_eq!(r.status(), 403);
}

/// STS GetSessionToken: credentials with exactly the caller's permissions, for 12 hours unless
/// `DurationSeconds` (900 to 129600) says otherwise; refused to the root user, to a session and
/// to a call naming an MFA device (there are none here), each beside a call that passes.
#[tokio::test]
async fn get_session_token_acts_as_its_user_for_the_duration_asked() {
    let srv = TestServer::start(4).await;
    let root = srv.client();
    for b in ["data", "other"] {
        srv.create_bucket(b).await;
        put(&root, b, "a.txt").await.unwrap();
    }
    let (ak, sk) = user_with_policy(&srv, "carol").await;
    let carol = (ak.as_str(), sk.as_str());
    let before = unix_now();
    let r = session_token(&srv, carol, None, &[]).await;
    let s = session_of(&r);
    assert!(r.1.contains("<GetSessionTokenResult>"), "{}", r.1);
    assert!(!r.1.contains("AssumedRoleUser"), "{}", r.1);
    let expiration = elem(&r.1, "Expiration").to_owned();
    assert!(
        expiration >= rfc3339(before + 43_200) && expiration <= rfc3339(before + 43_200 + 120),
        "the default is 12 hours: {expiration}"
    );
    let session = session_client(&srv, &s);
    get(&session, "data", "a.txt").await.unwrap();
    put(&session, "data", "by-session").await.unwrap();
    // No more than carol may: "other" is refused (root, the control, reads it).
    denied(get(&session, "other", "a.txt").await);
    get(&root, "other", "a.txt").await.unwrap();

    // DurationSeconds: AWS's bounds for an IAM user.
    for d in ["900", "129600"] {
        ok(&session_token(&srv, carol, None, &[("DurationSeconds", d)]).await);
    }
    for d in ["899", "129601", "x"] {
        refused(
            &session_token(&srv, carol, None, &[("DurationSeconds", d)]).await,
            400,
            "ValidationError",
        );
    }
    // The root user, a session (its own call is signed with its token), and an MFA device are
    // refused.
    refused(
        &session_token(&srv, ROOT, None, &[]).await,
        403,
        "AccessDenied",
    );
    refused(
        &session_token(&srv, (&s.access_key, &s.secret_key), Some(&s.token), &[]).await,
        403,
        "AccessDenied",
    );
    refused(
        &session_token(
            &srv,
            carol,
            None,
            &[
                ("SerialNumber", "arn:aws:iam::000000000000:mfa/carol"),
                ("TokenCode", "123456"),
            ],
        )
        .await,
        403,
        "AccessDenied",
    );
}

async fn session_token(
    srv: &TestServer,
    creds: (&str, &str),
    token: Option<&str>,
    extra: &[(&str, &str)],
) -> (u16, String) {
    let mut params = vec![("Action", "GetSessionToken")];
    params.extend_from_slice(extra);
    call_with_token(srv, 0, creds, token, "sts", &params).await
}

/// Seals session claims the way the server does (format 1: ChaCha20-Poly1305 under
/// HMAC-SHA256(root secret, "quarry iam secrets v1\0" + root access key), associated data
/// "quarry sts session v1"), so a token past its expiry can be made without waiting for one.
fn forge(access_key: &str, secret: &str, parent: &str, exp: i64) -> Session {
    use base64::Engine as _;
    use chacha20poly1305::aead::{Aead, KeyInit, Payload};
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(SECRET_KEY.as_bytes()).unwrap();
    mac.update(b"quarry iam secrets v1\0");
    mac.update(ACCESS_KEY.as_bytes());
    let key = mac.finalize().into_bytes();
    let cipher = chacha20poly1305::ChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(&key));
    let claims =
        serde_json::json!({"v": 1, "ak": access_key, "sk": secret, "parent": parent, "exp": exp});
    let nonce: [u8; 12] = rand::random();
    let ct = cipher
        .encrypt(
            chacha20poly1305::Nonce::from_slice(&nonce),
            Payload {
                msg: claims.to_string().as_bytes(),
                aad: b"quarry sts session v1",
            },
        )
        .unwrap();
    let mut raw = nonce.to_vec();
    raw.extend_from_slice(&ct);
    Session {
        access_key: access_key.into(),
        secret_key: secret.into(),
        token: base64::engine::general_purpose::STANDARD.encode(raw),
    }
}

#[tokio::test]
async fn expired_revoked_and_deleted_sessions_are_refused_at_once() {
    let srv = TestServer::start(4).await;
    srv.create_bucket("data").await;
    put(&srv.client(), "data", "a.txt").await.unwrap();
    let (ak, sk) = user_with_policy(&srv, "alice").await;
    let (bob_ak, bob_sk) = user_with_policy(&srv, "bob").await;

    // Expiry: a token one second past its end, beside the same token valid for ten minutes.
    let now = unix_now();
    let expired = forge("QSTSEXPIREDEXPIRED00", "expired-secret", &ak, now - 1);
    assert_eq!(
        code_of(
            session_client(&srv, &expired)
                .get_object()
                .bucket("data")
                .key("a.txt")
                .send()
                .await
        ),
        "ExpiredToken"
    );
    let live = forge("QSTSEXPIREDEXPIRED00", "expired-secret", &ak, now + 600);
    get(&session_client(&srv, &live), "data", "a.txt")
        .await
        .unwrap();

    let alice = session_client(&srv, &session_of(&assume(&srv, (&ak, &sk), &[]).await));
    let bob = session_client(
        &srv,
        &session_of(&assume(&srv, (&bob_ak, &bob_sk), &[]).await),
    );
    get(&alice, "data", "a.txt").await.unwrap();

    // The key that asked for the session made inactive: its sessions stop, and come back with it.
    let status = |s: &'static str| {
        [
            ("Action", "UpdateAccessKey"),
            ("UserName", "alice"),
            ("AccessKeyId", ak.as_str()),
            ("Status", s),
        ]
    };
    ok(&call(&srv, 0, ROOT, "iam", &status("Inactive")).await);
    assert_eq!(
        code_of(alice.get_object().bucket("data").key("a.txt").send().await),
        "InvalidToken"
    );
    get(&bob, "data", "a.txt").await.unwrap();
    ok(&call(&srv, 0, ROOT, "iam", &status("Active")).await);
    get(&alice, "data", "a.txt").await.unwrap();

    // The user deleted (its policy and key first, as IAM requires): refused at once.
    for params in [
        vec![
            ("Action", "DeleteUserPolicy"),
            ("UserName", "alice"),
            ("PolicyName", "data"),
        ],
        vec![
            ("Action", "DeleteAccessKey"),
            ("UserName", "alice"),
            ("AccessKeyId", ak.as_str()),
        ],
        vec![("Action", "DeleteUser"), ("UserName", "alice")],
    ] {
        ok(&call(&srv, 0, ROOT, "iam", &params).await);
    }
    assert_eq!(
        code_of(alice.get_object().bucket("data").key("a.txt").send().await),
        "InvalidToken"
    );
    get(&bob, "data", "a.txt").await.unwrap();
}

/// `quarry admin <args..> --endpoint .. --access-key .. --secret-key .. --json`: the answer's JSON.
async fn admin_json(srv: &TestServer, args: &[&str]) -> serde_json::Value {
    let endpoint = srv.endpoint();
    let mut all: Vec<&str> = args.to_vec();
    all.extend_from_slice(&[
        "--endpoint",
        &endpoint,
        "--access-key",
        srv.access_key(),
        "--secret-key",
        srv.secret_key(),
        "--json",
    ]);
    let out = crate::admin::quarry_admin(&all).await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "quarry admin {args:?}: {stdout}{stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Seconds since the Unix epoch.
fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `unix` seconds as RFC 3339 (UTC), for `--expires`.
fn rfc3339(unix: i64) -> String {
    let (days, secs) = (unix.div_euclid(86_400), unix.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Service accounts and disabled users, made with the real `quarry admin` CLI: a service account
/// acts as its parent narrowed by its own policy and stops at its expiry; a disabled user's own
/// key, service account and session are refused from the next request, and work again once the
/// user is enabled. Every refusal beside a control request that passes.
#[tokio::test]
async fn service_accounts_and_disabled_users_through_the_admin_cli() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_782_400 + 86_399), "2000-02-29T23:59:59Z");
    let srv = TestServer::start(4).await;
    srv.create_bucket("data").await;
    put(&srv.client(), "data", "a.txt").await.unwrap();
    let (ak, sk) = user_with_policy(&srv, "dave").await;
    let dave = srv.client_with(&ak, &sk);

    // A read-only service account of dave's: reads, and is refused what the parent may do.
    let dir = tempfile::tempdir().unwrap();
    let narrow = dir.path().join("read-only.json");
    std::fs::write(
        &narrow,
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::data/*"}]}"#,
    )
    .unwrap();
    let sa = admin_json(
        &srv,
        &[
            "svcacct",
            "add",
            "dave",
            "--name",
            "reader",
            "--policy",
            narrow.to_str().unwrap(),
        ],
    )
    .await;
    let (sa_ak, sa_sk) = (
        sa["accessKey"].as_str().unwrap().to_owned(),
        sa["secretKey"].as_str().unwrap().to_owned(),
    );
    let reader = srv.client_with(&sa_ak, &sa_sk);
    get(&reader, "data", "a.txt").await.unwrap();
    denied(put(&reader, "data", "by-reader").await);
    denied(list(&reader, "data", "").await);
    put(&dave, "data", "by-dave").await.unwrap();
    // Listed as dave's, without its secret.
    let listed = admin_json(&srv, &["svcacct", "list", "dave"]).await;
    let text = listed.to_string();
    assert!(text.contains(&sa_ak), "{text}");
    assert!(
        !text.contains(&sa_sk),
        "the secret is shown only at creation: {text}"
    );

    // A service account that expires in three seconds: works, then is refused.
    let now = unix_now();
    let brief = admin_json(
        &srv,
        &["svcacct", "add", "dave", "--expires", &rfc3339(now + 3)],
    )
    .await;
    let brief = srv.client_with(
        brief["accessKey"].as_str().unwrap(),
        brief["secretKey"].as_str().unwrap(),
    );
    put(&brief, "data", "by-brief").await.unwrap();
    let session = session_client(&srv, &session_of(&assume(&srv, (&ak, &sk), &[]).await));
    get(&session, "data", "a.txt").await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        put(&brief, "data", "by-brief").await,
        Err("InvalidAccessKeyId".to_owned())
    );
    get(&reader, "data", "a.txt").await.unwrap();

    // dave disabled: his key, his service account and his session are all refused at once.
    admin_json(&srv, &["user", "disable", "dave"]).await;
    assert_eq!(
        get(&dave, "data", "a.txt").await,
        Err("InvalidAccessKeyId".to_owned())
    );
    assert_eq!(
        get(&reader, "data", "a.txt").await,
        Err("InvalidAccessKeyId".to_owned())
    );
    assert_eq!(
        code_of(
            session
                .get_object()
                .bucket("data")
                .key("a.txt")
                .send()
                .await
        ),
        "InvalidToken"
    );
    // Another user is untouched; the root is never refused.
    let (ek, es) = user_with_policy(&srv, "erin").await;
    get(&srv.client_with(&ek, &es), "data", "a.txt")
        .await
        .unwrap();
    get(&srv.client(), "data", "a.txt").await.unwrap();
    // A disabled user cannot hand out new sessions either.
    refused(
        &assume(&srv, (&ak, &sk), &[]).await,
        403,
        "InvalidAccessKeyId",
    );

    // Enabled again: all three work, the service account still narrowed.
    admin_json(&srv, &["user", "enable", "dave"]).await;
    get(&dave, "data", "a.txt").await.unwrap();
    get(&reader, "data", "a.txt").await.unwrap();
    denied(put(&reader, "data", "by-reader").await);
    get(&session, "data", "a.txt").await.unwrap();

    // Removed: refused from the next request.
    admin_json(&srv, &["svcacct", "remove", &sa_ak]).await;
    assert_eq!(
        get(&reader, "data", "a.txt").await,
        Err("InvalidAccessKeyId".to_owned())
    );
    get(&dave, "data", "a.txt").await.unwrap();
}
