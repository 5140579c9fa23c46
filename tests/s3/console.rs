//! The web console's listener in the real binary: HTTPS with `Secure` cookies when the S3 port
//! has certificates, and a clear failure when an address given for it cannot be bound. (What
//! the console does is tested in crates/console and, in a browser, tests/python/test_console.py.)

use std::time::Duration;

use quarry_integration::*;

#[tokio::test]
async fn the_console_speaks_https_beside_an_https_s3_port_with_secure_cookies() {
    let mut s = TestServer::start_https(4).await;
    let port = free_port();
    s.set_env("QUARRY_CONSOLE_ADDRESS", &format!("127.0.0.1:{port}"));
    s.restart().await;
    let https = s.tls().unwrap().reqwest();
    let base = format!("https://127.0.0.1:{port}");
    let page = https.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("script-src 'self'"));

    // Wrong keys, then right ones: the cookie is Secure over HTTPS.
    let login = |secret: String| {
        let body = serde_json::json!({ "accessKey": s.access_key(), "secretKey": secret });
        https
            .post(format!("{base}/api/login"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let refused = login("wrong-secret-key".into()).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert!(refused.headers().get("set-cookie").is_none());
    let ok = login(s.secret_key().into()).await.unwrap();
    assert_eq!(ok.status(), 200);
    let cookie = ok.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("; Secure") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let listed = https
        .get(format!("{base}/api/s3/"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert!(listed
        .text()
        .await
        .unwrap()
        .contains("<ListAllMyBucketsResult"));

    // Plain HTTP to the console gets no page.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await;
    assert!(
        plain.map(|r| r.status() != 200).unwrap_or(true),
        "plain HTTP got the console"
    );
}

#[tokio::test]
async fn a_console_address_that_is_taken_stops_the_start_with_the_reason() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let drives: Vec<String> = (1..=4)
        .map(|i| dir.path().join(format!("d{i}")).display().to_string())
        .collect();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(quarry_bin())
            .arg("server")
            .args(&drives)
            .args(["--address", &format!("127.0.0.1:{}", free_port())])
            .args(["--console-address", &addr])
            .env("QUARRY_ROOT_USER", "consoleadmin")
            .env("QUARRY_ROOT_PASSWORD", "console-admin-secret")
            .env("HOME", dir.path())
            .env_remove("QUARRY_CONSOLE_ADDRESS")
            .env_remove("QUARRY_CERTS_DIR")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("quarry did not exit")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("cannot listen on --console-address {addr}")),
        "{stderr}"
    );
}
